"""`fim validate` on remote A2A agents (fim.yaml `a2a_agents:`, newcomer-54 #8): a name in
`delegates:` may be one, with a did-you-mean over local and remote agents, and a URL written
there is told to be declared first; a remote agent's bad `url` or header is a problem at its
line (never quoting the header's value); one whose `${VAR}` is unset is unavailable, as a
connector is: a warning at its line naming who delegates to it, and their runs are refused.
The a2a-sdk (`fim[a2a]`) is imported by no check and no run that calls no remote agent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.run.preflight import PreflightError, check_agent
from tests.inprocess_cli import run_fim

SECRET = "sk-remote-0123456789abcdef"


def project(root: Path, fim_yaml: str, delegates: str, helper: bool = False) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text('name: p\nstate: "sqlite:///.fim/state.db"\n' + fim_yaml)
    (root / "s.yaml").write_text("- text: hi\n")
    (root / "agents" / "buyer.yaml").write_text(f"model: scripted:s.yaml\ndelegates: {delegates}\n")
    if helper:
        (root / "agents" / "helper.yaml").write_text("model: scripted:s.yaml\n")
    return root


def validate(root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return run_fim("validate", "--project", str(root), cwd=root, env=env, timeout=60)


REMOTES = """\
a2a_agents:
  supplier:
    url: https://supplier.example/a2a
    headers: {Authorization: "Bearer ${SUPPLIER_KEY}"}
"""


def test_a_remote_agent_in_delegates_validates_and_an_unknown_name_gets_a_did_you_mean(
    tmp_path: Path,
):
    root = project(tmp_path / "ok", REMOTES, "[supplier]")
    assert validate(root, SUPPLIER_KEY=SECRET).returncode == 0

    root = project(tmp_path / "typo", REMOTES, "[supplir, http://127.0.0.1:31120/a2a]")
    out = validate(root, SUPPLIER_KEY=SECRET)
    assert out.returncode == 1
    assert (
        "agents/buyer.yaml:2:13: unknown agent 'supplir' (did you mean 'supplier'?)" in out.stdout
    )
    assert (
        "agents/buyer.yaml:2:22: unknown agent 'http://127.0.0.1:31120/a2a' (declare the "
        "remote agent in fim.yaml, `a2a_agents: {supplier: {url: http://127.0.0.1:31120/a2a}}`"
    ) in out.stdout


def test_a_bad_url_a_bad_header_and_a_clash_are_problems_at_their_lines(tmp_path: Path):
    bad = """\
a2a_agents:
  supplier:
    url: ftp://supplier.example/a2a
    headers:
      Authorization: "Bearer ${SUPPLIER_KEY}"
      X-Tenant: "${TENANT}"
  helper:
    url: https://helper.example/.well-known/agent-card.json
"""
    root = project(tmp_path, bad, "[supplier, helper]", helper=True)
    out = validate(root, SUPPLIER_KEY=SECRET, TENANT="caf\u00e9-tenant")
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert any(
        line.startswith("fim.yaml:5:10: url 'ftp://supplier.example/a2a' of remote A2A agent "
                        "'supplier' is not an http(s) URL")
        for line in lines
    ), out.stdout  # fmt: skip
    assert any(
        line.startswith("fim.yaml:8:17: header 'X-Tenant' (read from TENANT): its value holds a "
                        "character outside ASCII")
        for line in lines
    ), out.stdout  # fmt: skip
    assert "fim.yaml:9:3: remote A2A agent 'helper' has the name of the agent of" in out.stdout
    assert "caf\u00e9" not in out.stdout + out.stderr and SECRET not in out.stdout + out.stderr


def test_an_unset_variable_makes_the_remote_agent_unavailable_a_warning_and_a_refused_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    root = project(tmp_path, REMOTES, "[supplier]")
    out = validate(root)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (
        "fim.yaml:6:30: warning: remote A2A agent 'supplier' is unavailable: environment "
        "variable 'SUPPLIER_KEY' is not set; delegated to by 'buyer', which fail when they start"
    ) in out.stderr
    strict = run_fim("validate", "--strict", "--project", str(root), cwd=root, timeout=60)
    assert strict.returncode == 1

    monkeypatch.delenv("SUPPLIER_KEY", raising=False)
    snapshot = compile_project(root)
    assert "supplier" not in snapshot.project.a2a_agents  # never called with "" for a key
    with pytest.raises(PreflightError) as refused:
        check_agent(snapshot, snapshot.agents["buyer"])
    assert "remote A2A agent 'supplier' is unavailable: SUPPLIER_KEY not set" in str(refused.value)


def test_no_check_and_no_run_without_a_remote_call_imports_the_a2a_sdk(tmp_path: Path):
    root = project(tmp_path, REMOTES, "[supplier]")
    (root / "agents" / "solo.yaml").write_text("model: scripted:s.yaml\n")
    code = (
        "import asyncio, sys\n"
        "from fim.build.compile import compile_project\n"
        "from fim.run.preflight import check_agent\n"
        "from fim.testing.runs import run_once\n"
        f"snapshot = compile_project({str(root)!r})\n"
        "check_agent(snapshot, snapshot.agents['buyer'])\n"
        "assert asyncio.run(run_once(snapshot, 'solo', 'hi')).output == 'hi'\n"
        "print(sorted(m for m in sys.modules if m == 'a2a' or m.startswith('a2a.')))\n"
    )
    env = {"SUPPLIER_KEY": SECRET, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_the_extra_the_run_is_refused_with_the_pip_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("SUPPLIER_KEY", SECRET)
    snapshot = compile_project(project(tmp_path, REMOTES, "[supplier]"))
    monkeypatch.setitem(sys.modules, "a2a", None)  # as if `fim[a2a]` were not installed
    with pytest.raises(PreflightError) as refused:
        check_agent(snapshot, snapshot.agents["buyer"])
    assert "remote A2A agent 'supplier', which needs the a2a-sdk" in str(refused.value)
    assert refused.value.hint is not None and "pip install 'fim[a2a]'" in refused.value.hint
