"""What a hot reload (a file edit, or a commit `fim serve --git` fetched) may never do.

- attack-43 #3: open a server that start-up would refuse. `fim serve` on a network
  address without keys refuses to start unless `server.allow_open`; a reload that removed
  `server.api_keys` (or emptied them through a `${VAR:-}`) was swapped in and the server
  answered everyone. The same rule now gates every reload: the old snapshot keeps serving
  and `last_reload_error` names the setting.
- attack-43 #4: run the Python of an edit it rejects inside the server. A rejected edit's
  modules are never imported into the serving process: not at all when its files have
  problems, and a new module only after a short-lived child process compiled the whole
  project without a problem.
- attack-44 F1: import bytes no child checked. The server pins the files when it compiles
  and the child reads them again later; a save in between had the child pass the new
  content while the server imported the old. The child now answers with a fingerprint of
  what it compiled, and a candidate whose files changed meanwhile is rejected.
- attack-44 F2: import the Python of a candidate the reload gate refuses: the gates judge
  the candidate's settings before any of its Python is imported.
- attack-44 F7: reject every Python edit of a server whose dependencies come from
  PYTHONPATH or the user's site-packages: the child gets this process's import path.
- attack-44 F8: warn on every reload of a server started with `--port` that fim.yaml
  changed `server.port`: only a reload that changes it is logged.
- attack-44 N2: leave a module's processes running, or wait on them: the child runs in a
  session of its own, killed whole once it answered or timed out, with its address space
  capped.
- `server.cors_origins` applies at reload, CORS headers included (they lagged until a
  restart while the cross-site check already followed the reload).
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from fim.build import gitops
from fim.build import vet as vetting
from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder, reload_once
from fim.build.snapshot import Snapshot
from fim.errors import ConfigError, Problem
from fim.server.app import create_app, reload_gate

KEYED = "name: p\nmodels: {general: openai/gpt-4o-mini}\nserver:\n  api_keys: ['${FIM_KEY}']\n"
AGENT = "description: a\nmodel: general\ninstructions: hi\n"
MARKER = """import os
with open(os.path.join(os.path.dirname(__file__), "..", "ran.txt"), "a") as f:
    f.write(f"{os.getpid()}\\n")
"""
TOOL = '\ndef add(a: int, b: int) -> int:\n    """Add."""\n    return a + b\n'


def project(root: Path, fim_yaml: str = KEYED) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "hooks").mkdir()
    (root / "fim.yaml").write_text(fim_yaml)
    (root / "agents" / "a.yaml").write_text(AGENT)
    return root


def served(root: Path, host: str) -> SnapshotHolder:
    holder = SnapshotHolder(compile_project(root))
    holder.gates.append(reload_gate(host, 8000))
    return holder


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIM_KEY", "k-0123456789")
    monkeypatch.delenv("FIM_KEY_TYPO", raising=False)


@pytest.mark.parametrize("keys", ["api_keys: []", "api_keys: ['${FIM_KEY_TYPO:-}']", "port: 8000"])
async def test_a_reload_cannot_leave_a_network_server_without_keys(
    tmp_path: Path, keys: str
) -> None:
    root = project(tmp_path)
    holder = served(root, "10.9.9.9")
    first = holder.current
    (root / "fim.yaml").write_text(KEYED.replace("api_keys: ['${FIM_KEY}']", keys))
    assert not await reload_once(root, holder)
    assert holder.current is first  # the keyed snapshot keeps serving
    (problem,) = holder.errors
    assert problem.path == "fim.yaml" and problem.message.startswith("server.api_keys: ")
    assert "10.9.9.9" in problem.message and "allow_open" in (problem.hint or "")


@pytest.mark.parametrize(
    ("host", "server"),
    [("127.0.0.1", "api_keys: []"), ("10.9.9.9", "allow_open: true")],
    ids=["loopback", "allow_open"],
)
async def test_what_start_accepts_a_reload_accepts(tmp_path: Path, host: str, server: str) -> None:
    root = project(tmp_path)
    holder = served(root, host)
    (root / "fim.yaml").write_text(KEYED.replace("api_keys: ['${FIM_KEY}']", server))
    assert await reload_once(root, holder)
    assert not holder.errors


async def test_a_rejected_edit_with_other_problems_imports_none_of_its_python(
    tmp_path: Path,
) -> None:
    root = project(tmp_path)
    holder = served(root, "127.0.0.1")
    (root / "hooks" / "evil.py").write_text(MARKER + TOOL)
    (root / "agents" / "a.yaml").write_text(AGENT + "tools: ['evil:add']\n")
    (root / "agents" / "b.yaml").write_text(AGENT + "connectors: [does_not_exist]\n")
    assert not await reload_once(root, holder)
    assert "does_not_exist" in " ".join(p.message for p in holder.errors)
    assert not (root / "ran.txt").exists()  # not here, not in a child


async def test_a_module_that_fails_is_checked_in_a_child_never_in_the_server(
    tmp_path: Path,
) -> None:
    root = project(tmp_path)
    holder = served(root, "127.0.0.1")
    (root / "hooks" / "evil.py").write_text(MARKER + "raise RuntimeError('boom')\n" + TOOL)
    (root / "agents" / "a.yaml").write_text(AGENT + "tools: ['evil:add']\n")
    assert not await reload_once(root, holder)
    assert "RuntimeError: boom" in str(holder.errors)
    ran = (root / "ran.txt").read_text().split()
    assert ran and str(os.getpid()) not in ran  # its code ran in the child only
    assert not [m for m in sys.modules if m.startswith("fim_project_hooks_") and "evil" in m]


async def test_a_good_module_is_imported_after_the_child_and_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    children: list[Path] = []
    vet = vetting.vet_in_child

    def counted(snapshot: Snapshot) -> list[Problem]:
        children.append(snapshot.root)
        return vet(snapshot)

    monkeypatch.setattr(vetting, "vet_in_child", counted)
    root = project(tmp_path)
    holder = served(root, "127.0.0.1")
    (root / "hooks" / "good.py").write_text(MARKER + TOOL)
    (root / "agents" / "a.yaml").write_text(AGENT + "tools: ['good:add']\n")
    assert await reload_once(root, holder)
    child, server = (root / "ran.txt").read_text().split()
    assert child != str(os.getpid()) and server == str(os.getpid())
    edited = AGENT.replace("description: a", "description: b") + "tools: ['good:add']\n"
    (root / "agents" / "a.yaml").write_text(edited)
    assert await reload_once(root, holder)  # no Python changed: no child, nothing run again
    assert len(children) == 1 and len((root / "ran.txt").read_text().split()) == 2


async def test_a_file_saved_again_while_the_child_checks_it_is_never_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second save lands after the server pinned the first and before the child reads
    the files: the child passes the second, the server holds the first."""
    root = project(tmp_path)
    holder = served(root, "127.0.0.1")
    (root / "hooks" / "t.py").write_text(MARKER + "raise RuntimeError('first save')\n" + TOOL)
    (root / "agents" / "a.yaml").write_text(AGENT + "tools: ['t:add']\n")
    vet = vetting.vet_in_child

    def saved_again(snapshot: Snapshot) -> list[Problem]:
        (root / "hooks" / "t.py").write_text(TOOL)
        return vet(snapshot)

    monkeypatch.setattr(vetting, "vet_in_child", saved_again)
    assert not await reload_once(root, holder)
    (problem,) = holder.errors
    assert "changed while a child process checked" in problem.message
    assert not (root / "ran.txt").exists()  # the first save ran nowhere
    monkeypatch.setattr(vetting, "vet_in_child", vet)
    assert await reload_once(root, holder)  # the watcher's next reload: the second save


@pytest.mark.parametrize("how", ["edit", "commit"])
async def test_a_candidate_the_gate_refuses_imports_none_of_its_python(
    tmp_path: Path, how: str
) -> None:
    root = project(tmp_path)
    holder = served(root, "10.9.9.9")
    (root / "hooks" / "evil.py").write_text(MARKER + TOOL)
    (root / "agents" / "a.yaml").write_text(AGENT + "tools: ['evil:add']\n")
    (root / "fim.yaml").write_text(KEYED.replace("api_keys: ['${FIM_KEY}']", "api_keys: []"))
    if how == "edit":
        assert not await reload_once(root, holder)
        problems = holder.errors
    else:  # `fim serve --git`: a fetched commit, compiled with the server's holder
        with pytest.raises(ConfigError) as rejected:
            gitops._compile(root, "0" * 40, holder)
        problems = rejected.value.problems
    assert [p.message.split(":")[0] for p in problems] == ["server.api_keys"]
    assert not (root / "ran.txt").exists()  # not in the server, and no child was needed
    assert not [m for m in sys.modules if m.startswith("fim_project_hooks_") and "evil" in m]


async def test_the_child_imports_what_this_process_can_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library on PYTHONPATH (here: on sys.path) that `python -I` alone would not see."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "fim_test_lib44.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(lib))
    root = project(tmp_path / "p")
    uses = "import fim_test_lib44\n" + TOOL
    (root / "hooks" / "t.py").write_text(uses)
    (root / "agents" / "a.yaml").write_text(AGENT + "tools: ['t:add']\n")
    holder = served(root, "127.0.0.1")
    (root / "hooks" / "t.py").write_text(uses.replace("a + b", "b + a"))
    assert await reload_once(root, holder), holder.errors


async def test_only_a_reload_that_changes_server_port_logs_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Started with `--port 18744`, a fim.yaml with no `server.port` (8000)."""
    root = project(tmp_path, "name: p\nmodels: {general: openai/gpt-4o-mini}\n")
    holder = SnapshotHolder(compile_project(root))
    holder.gates.append(reload_gate("127.0.0.1", 18744))
    caplog.set_level(logging.WARNING, "fim.server")
    (root / "agents" / "a.yaml").write_text(AGENT.replace("hi", "hello"))
    assert await reload_once(root, holder)
    assert "server.port" not in caplog.text
    (root / "fim.yaml").write_text(
        "name: p\nmodels: {general: openai/gpt-4o-mini}\nserver: {port: 9000}\n"
    )
    assert await reload_once(root, holder)
    assert "127.0.0.1:9000; fim serve still listens on 127.0.0.1:18744" in caplog.text


FORKS = """import os, resource, signal, sys, time
here = os.path.dirname(__file__)
if sys.flags.isolated:  # in the child only
    with open(os.path.join(here, "..", "limits.txt"), "w") as f:
        f.write(f"{resource.getrlimit(resource.RLIMIT_AS)[0]} ")
        f.write(str(signal.getitimer(signal.ITIMER_REAL)[0]))
    if os.fork() == 0:
        with open(os.path.join(here, "..", "forked.txt"), "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)
        os._exit(0)
    while not os.path.exists(os.path.join(here, "..", "forked.txt")):
        time.sleep(0.01)
    WAIT
"""


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie nobody reaps, killed, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("wait", ["", "time.sleep(300)"], ids=["answers", "times_out"])
async def test_the_child_leaves_no_process_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wait: str
) -> None:
    """A module that forks at import, then answers (or hangs): the child's whole session is
    killed. The child ran with its address space capped, and an alarm that ends it should
    this process be gone before it (`kill` never came)."""
    bound = 4.0 if wait else 10.0  # the hanging case waits it out: not 30 s
    monkeypatch.setattr(vetting, "VET_TIMEOUT_S", bound)
    root = project(tmp_path)
    holder = served(root, "127.0.0.1")
    (root / "hooks" / "forks.py").write_text(FORKS.replace("WAIT", wait) + TOOL)
    (root / "agents" / "a.yaml").write_text(AGENT + "tools: ['forks:add']\n")
    assert await reload_once(root, holder) is not bool(wait)
    if wait:
        assert f"did not finish within {bound:g} s" in holder.errors[0].message
    forked = int((root / "forked.txt").read_text())
    for _ in range(500):  # SIGKILL was sent: it ends at its next scheduling
        if not _alive(forked):
            break
        await asyncio.sleep(0.01)
    assert not _alive(forked)
    memory, alarm = (root / "limits.txt").read_text().split()
    assert int(memory) != resource.RLIM_INFINITY and int(memory) <= vetting.VET_MEMORY_BYTES
    assert bound < float(alarm) <= bound + 5  # it ends on its own soon after this one stops


def test_cors_origins_apply_at_reload(tmp_path: Path) -> None:
    root = project(tmp_path, "name: p\nmodels: {general: openai/gpt-4o-mini}\n")
    holder = SnapshotHolder(compile_project(root))
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
    with TestClient(create_app(holder)) as client:
        assert (
            "access-control-allow-origin"
            not in client.options("/v1/agents", headers=preflight).headers
        )
        (root / "fim.yaml").write_text(
            "name: p\nmodels: {general: openai/gpt-4o-mini}\n"
            "server: {cors_origins: ['https://app.example']}\n"
        )
        holder.swap(compile_project(root))
        allowed = client.options("/v1/agents", headers=preflight)
        assert allowed.headers["access-control-allow-origin"] == "https://app.example"
        (root / "fim.yaml").write_text("name: p\nmodels: {general: openai/gpt-4o-mini}\n")
        holder.swap(compile_project(root))
        assert (
            "access-control-allow-origin"
            not in client.options("/v1/agents", headers=preflight).headers
        )
