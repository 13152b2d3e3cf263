"""attack-34 #4: with `sandbox: {project: read}`, a SQLite state store kept in the project
outside the folders fim hides (`.fim/`, the sandbox folder, `<sandbox>-keys`) is refused,
by `fim validate` at the agent's `sandbox.project` key and by every `shell`/`python_exec`
call, with the same text.

Hiding such a store's files one by one did not hold: a `-wal` SQLite made during the call,
or deleted and made again, was readable with other tenants' rows. The store is placed as
the store itself reads `state:` (stripped, relative to the project, `sqlite+driver:` forms
refused), symlinks resolved. The known layouts (the store in `.fim/`, in the sandbox
folder, outside the project, PostgreSQL, in memory) keep running with `.fim/` hidden.
Calls run in real bubblewrap, in the root mode and in the user-namespace mode.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.cli import app
from fim.config.schema import AgentDecl, Project
from fim.run.services import RunContext, Services
from fim.tools import ToolRegistry, builtin, sandbox
from fim.tools.sandbox.project import store_shown

needs_bwrap = pytest.mark.skipif(
    sandbox.unavailable() is not None,
    reason=f"bubblewrap is not installed here ({sandbox.unavailable()})",
)
SECRET = "tenant-secret-7781"
SHOWN = (
    "sandbox.project: read would show the SQLite state store data/state.db (every run's "
    "transcripts and sessions) to sandboxed programs: it is in the project, outside .fim/ "
    "(keep the store in .fim/ (state: sqlite:///.fim/state.db, the default) or outside the "
    "project)"
)
UNPLACED = "sandbox.project: read cannot tell where the SQLite state store is"


@pytest.fixture(params=["root", "user"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The sandbox's two user modes, as tests/tools/test_sandbox_project.py forces them."""
    if request.param == "root":
        if os.geteuid() != 0:
            pytest.skip("the root mode needs fim to run as root")
        monkeypatch.setattr(sandbox, "_PRIVILEGED", True)
    elif os.geteuid() == 0:
        monkeypatch.setattr(sandbox, "_PRIVILEGED", False)
    return str(request.param)


def project(root: Path, **fim_yaml: Any) -> Path:
    """A served checkout (world-readable, as the root mode needs) with a WAL-mode store of
    another tenant's row at data/state.db, and `.fim/` with fim's default store."""
    for folder in (root, root / "data", root / ".fim", root / "agents"):
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o755)
    (root / "fim.yaml").write_text(
        "name: p\n" + "".join(f"{k}: {v}\n" for k, v in fim_yaml.items())
    )
    (root / "src.txt").write_text("the project source\n")
    db = sqlite3.connect(root / "data" / "state.db")
    db.execute("pragma journal_mode=wal")
    db.execute("create table t(x)")
    db.execute("insert into t values (?)", (SECRET,))
    db.commit()
    db.close()
    (root / ".fim" / "state.db").write_text(SECRET)
    for file in (root / "fim.yaml", root / "src.txt", root / "data" / "state.db"):
        file.chmod(0o644)
    return root


def tools_of(root: Path, state: str, sandbox_folder: str = ".fim/sandbox") -> ToolRegistry:
    settings = Project.model_validate({"state": state, "sandbox": sandbox_folder})
    ctx = RunContext(
        snapshot=Snapshot(root=root, project=settings),
        agent=AgentDecl(name="reader", tools=["python_exec", "shell"], sandbox={"project": "read"}),
        services=Services(providers=CAPABILITIES, root=root),
    )
    return ToolRegistry(builtin.provide(ctx).tools)


PROBE = "echo ran; grep -rl tenant-secret /project; cat src.txt"


@needs_bwrap
@pytest.mark.parametrize(
    "state",
    [
        "sqlite:///data/state.db",
        " sqlite:///data/state.db",  # the store strips it: it opened data/state.db
        "sqlite:///data/state.db\n",  # ${FIM_STATE} read from a secret file
        "sqlite:///./data/../data/state.db",
        "sqlite+pysqlite:///data/state.db",  # the store's own driver name (fim.store_url)
        "SQLite:///data/state.db",
    ],
)
async def test_a_store_in_the_project_outside_fims_folders_refuses_the_call(
    tmp_path: Path, mode: str, state: str
) -> None:
    """Nothing runs: no `-wal` made later, by this call or the next, can be read."""
    root = project(tmp_path / "p")
    tools = tools_of(root, state)
    for name, args in (("shell", {"command": PROBE}), ("python_exec", {"code": "print('ran')"})):
        result = await tools.call(name, args, timeout=30)
        assert result.is_error, result.content
        assert result.content == f"Error: {SHOWN}.", result.content
        assert SECRET not in result.content  # the whole answer is the refusal: nothing ran


@needs_bwrap
@pytest.mark.parametrize(
    "state",
    ["sqlite:///file:data/state.db?uri=true"],
)
async def test_a_store_fim_cannot_place_refuses_the_call(
    tmp_path: Path, mode: str, state: str
) -> None:
    root = project(tmp_path / "p")
    result = await tools_of(root, state).call("shell", {"command": PROBE}, timeout=30)
    assert result.is_error and UNPLACED in result.content, result.content
    assert "write state: as sqlite:///path" in result.content


def test_symlinks_are_resolved_to_where_the_store_is(tmp_path: Path) -> None:
    """A link in `.fim/` (or a linked folder) to a store elsewhere in the project: the
    store's files are at the link's target, which no mount hides."""
    root = project(tmp_path / "p")
    (root / ".fim" / "state.db").unlink()
    (root / ".fim" / "state.db").symlink_to("../data/state.db")
    (root / ".fim" / "linked").symlink_to("../data")
    (root / "data" / "alias.db").symlink_to("state.db")
    for state in (
        "sqlite:///.fim/state.db",
        "sqlite:///.fim/linked/state.db",
        "sqlite:///data/alias.db",
        f"sqlite:///{root / '.fim' / 'state.db'}",  # absolute: resolved as well
    ):
        shown = store_shown(root, sandbox=".fim/sandbox", state_url=state)
        assert shown is not None and "data/state.db" in shown[0], state
    linked_root = tmp_path / "checkout"
    linked_root.symlink_to(root)
    shown = store_shown(
        linked_root, sandbox=".fim/sandbox", state_url=f"sqlite:///{root / 'data' / 'state.db'}"
    )
    assert shown is not None, "the project reached by a link is the same project"


@needs_bwrap
@pytest.mark.parametrize(
    "state",
    [
        "sqlite:///.fim/state.db",  # the default
        "sqlite:///box/state.db",  # in the sandbox folder, hidden with it
        "OUTSIDE",  # outside the project: not in the sandbox at all
        "postgresql://fim@127.0.0.1:1/none",  # never opened here
        "sqlite:///:memory:",
    ],
)
async def test_the_known_layouts_still_run_with_fims_state_hidden(
    tmp_path: Path, mode: str, state: str
) -> None:
    root = project(tmp_path / "p")
    (root / "data" / "state.db").unlink()  # only fim's own store holds the secret here
    for end in ("-wal", "-shm"):
        (root / "data" / f"state.db{end}").unlink(missing_ok=True)
    if state == "OUTSIDE":
        state = f"sqlite:///{tmp_path / 'elsewhere' / 'state.db'}"
    result = await tools_of(root, state, "box").call("shell", {"command": PROBE}, timeout=30)
    assert not result.is_error, result.content
    assert "ran" in result.content and "the project source" in result.content
    assert SECRET not in result.content


@needs_bwrap
async def test_fim_folder_reached_by_a_link_in_the_project_stays_a_known_layout(
    tmp_path: Path, mode: str
) -> None:
    """`.fim` a link to `state/` in the project: the store is in the folder hidden."""
    root = project(tmp_path / "p")
    (root / "data" / "state.db").unlink()
    for end in ("-wal", "-shm"):
        (root / "data" / f"state.db{end}").unlink(missing_ok=True)
    (root / ".fim").rename(root / "state")
    (root / ".fim").symlink_to("state")
    result = await tools_of(root, "sqlite:///.fim/state.db").call(
        "shell", {"command": PROBE + "; ls -A /project/state | wc -l"}, timeout=30
    )
    assert not result.is_error, result.content
    assert SECRET not in result.content and "ran" in result.content


def _validate(root: Path) -> Any:
    return CliRunner().invoke(app, ["validate", "--project", str(root)])


def test_validate_reports_it_at_the_agents_sandbox_project_key(tmp_path: Path) -> None:
    root = project(tmp_path / "p", state="sqlite:///data/state.db")
    agent = root / "agents" / "coder.yaml"
    agent.write_text("model: openai/gpt-4o-mini\ntools: [shell]\nsandbox:\n  project: read\n")
    (root / "agents" / "plain.yaml").write_text("model: openai/gpt-4o-mini\ntools: [shell]\n")
    found = _validate(root)
    assert found.exit_code != 0
    assert f"agents/coder.yaml:4:12: {SHOWN}" in " ".join(found.output.split()), found.output
    assert "plain.yaml" not in found.output  # it never shows the project
    (root / "fim.yaml").write_text("name: p\n")  # the default store, in .fim/
    assert _validate(root).exit_code == 0, _validate(root).output
