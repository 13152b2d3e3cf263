"""A run whose stored input had a secret masked is not run again (attack-61 F7): the
stored input holds the mask (`***`) where the secret was, so a rerun would run another
text than the run was asked, with no notice. `POST /v1/runs/{id}/rerun` answers 409 and
`fim runs rerun` exits 1, each saying the input must be sent anew; a run whose input held
no secret is run again as before.
"""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.masking import remember
from fim.server.app import create_app
from fim.store.run_inputs import masked_input

SECRET = "vault-attack61-SECRET-987654"


def project(root: Path) -> Path:
    files = {
        "fim.yaml": 'name: a61\nstate: "sqlite:///.fim/state.db"\n',
        "fine.script.yaml": 'default: [{text: "fine"}]\n',
        "agents/fine.yaml": "description: f\nmodel: scripted:fine.script.yaml\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_rerun_of_a_masked_input_is_refused_over_http(tmp_path: Path) -> None:
    remember({SECRET})  # a secret this process knows: masked wherever fim writes it
    app = create_app(SnapshotHolder(compile_project(project(tmp_path))))
    with TestClient(app, base_url="http://localhost") as client:
        body = {"input": f"hello, the code is {SECRET}"}
        masked = client.post("/v1/agents/fine/runs", json=body).json()["run_id"]
        plain = client.post("/v1/agents/fine/runs", json={"input": "hello"}).json()["run_id"]
        refused = client.post(f"/v1/runs/{masked}/rerun")
        assert refused.status_code == 409
        said = refused.json()
        assert "had a secret masked in its stored input" in str(said)
        assert "send the input anew: POST /v1/agents/fine/runs" in str(said)
        assert client.post(f"/v1/runs/{plain}/rerun").status_code == 200


def test_fim_runs_rerun_of_a_masked_input_exits_1(tmp_path: Path) -> None:
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    remember({SECRET})
    root = project(tmp_path)
    runner = CliRunner()
    ran = runner.invoke(app, ["run", "fine", f"the code is {SECRET}", "-p", str(root)])
    assert ran.exit_code == 0, ran.output
    again = runner.invoke(app, ["runs", "rerun", "last", "-p", str(root)])
    assert again.exit_code == 1
    out = again.stdout + again.stderr
    assert "had a secret masked in its stored input" in out and "send the input anew" in out
    assert "Traceback" not in out


def test_only_an_input_holding_the_mask_counts_as_masked() -> None:
    assert masked_input("the code is ***")
    assert not masked_input("the code is * and ** but not three")
