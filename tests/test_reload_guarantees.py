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
- `server.cors_origins` applies at reload, CORS headers included (they lagged until a
  restart while the cross-site check already followed the reload).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from fim.build import vet as vetting
from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder, reload_once
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
    monkeypatch.setattr(vetting, "vet_in_child", lambda root: children.append(root) or vet(root))
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
