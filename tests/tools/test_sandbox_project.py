"""`sandbox: {project: read}` (fim/tools/sandbox/project.py): `shell` and `python_exec` see
the project read-only at /project, and nothing of fim's own state.

Attacked the way a prompt-injected model would try: read the state store, write a hook,
follow a symlink the project holds out to the host, reach another API key's folder. Every
attack runs in real bubblewrap, in the root mode (the sandbox is host `nobody`) and in the
user-namespace mode (how fim runs as a normal user; forced as root the way the other
sandbox tests force it), and checks the host afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.cli import app
from fim.config.schema import AgentDecl, Project
from fim.run.services import RunContext, Services
from fim.tools import ToolRegistry, builtin, sandbox
from fim.tools.builtin._common import key_folder
from fim.types import ToolResult

needs_bwrap = pytest.mark.skipif(
    sandbox.unavailable() is not None,
    reason=f"bubblewrap is not installed here ({sandbox.unavailable()})",
)
STATE = "fim-state-secret-51c2"
OTHER_KEY = "fim-other-tenant-9e07"
SOURCE = "print('the project source')\n"


@pytest.fixture(params=["root", "user"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The sandbox's two user modes: as root bwrap keeps the host user namespace and the
    command runs as host `nobody`; as a normal user (or root without the privilege to
    create namespaces) it runs in a user namespace of its own."""
    if request.param == "root":
        if os.geteuid() != 0:
            pytest.skip("the root mode needs fim to run as root")
        monkeypatch.setattr(sandbox, "_PRIVILEGED", True)
    elif os.geteuid() == 0:
        monkeypatch.setattr(sandbox, "_PRIVILEGED", False)
    return str(request.param)


def make_project(root: Path, fim_yaml: str = "name: p\n") -> Path:
    """A project as an operator has it: sources, fim's state in .fim/ (the store, another
    API key's sandbox folder), and links a hostile commit could add."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)  # root mode: the sandbox is host `nobody`, as for a served checkout
    (root / "fim.yaml").write_text(fim_yaml)
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text(SOURCE)
    (root / "hooks").mkdir()
    (root / "hooks" / "tools.py").write_text("def f() -> int:\n    return 1\n")
    for path in (root, root / "src", root / "hooks"):
        path.chmod(0o755)
    for path in (root / "fim.yaml", root / "src" / "app.py", root / "hooks" / "tools.py"):
        path.chmod(0o644)
    state = root / ".fim"
    state.mkdir()
    (state / "state.db").write_text(STATE)
    other = key_folder(root / ".fim" / "sandbox", "another-key") / "scratch"
    other.mkdir(parents=True)
    (other / "notes.txt").write_text(OTHER_KEY)
    (root / "shadow").symlink_to("/etc/shadow")
    (root / "root-home").symlink_to("/root")
    (root / "store").symlink_to(state / "state.db")  # absolute: the host path of the store
    (root / "store-rel").symlink_to(".fim/state.db")
    (root / "keys").symlink_to(".fim/sandbox-keys")
    return root


def make_tools(root: Path, owner: str = "", **agent: Any) -> ToolRegistry:
    agent.setdefault("name", "reader")
    agent.setdefault("tools", ["python_exec", "shell"])
    agent.setdefault("sandbox", {"project": "read"})
    snapshot = Snapshot(root=root, project=Project.model_validate(_fim_yaml(root)))
    ctx = RunContext(
        snapshot=snapshot,
        agent=AgentDecl(**agent),
        services=Services(providers=CAPABILITIES, root=root),
        owner=owner,
    )
    return ToolRegistry(builtin.provide(ctx).tools)


def _fim_yaml(root: Path) -> dict[str, Any]:
    loaded = yaml.safe_load((root / "fim.yaml").read_text())
    return {k: v for k, v in loaded.items() if k != "name"}


def streams(result: ToolResult) -> tuple[list[str], list[str]]:
    """The lines of stdout and of stderr in a tool's observation."""
    body = result.content.split("--- stdout ---\n", 1)[-1]
    out, _, err = body.partition("--- stderr ---\n")
    if not result.content.count("--- stdout ---"):
        out, err = "", result.content.split("--- stderr ---\n", 1)[-1]
    return out.splitlines(), err.splitlines()


async def shell(tools: ToolRegistry, command: str) -> ToolResult:
    return await tools.call("shell", {"command": command}, timeout=30)


async def python(tools: ToolRegistry, code: str) -> ToolResult:
    return await tools.call("python_exec", {"code": code}, timeout=30)


@needs_bwrap
async def test_the_project_is_the_read_only_working_directory(tmp_path: Path, mode: str) -> None:
    """The model reads the repository where it stands; it cannot change a hook that fim
    would reload and run outside the sandbox, nor add a file."""
    root = make_project(tmp_path / "p")
    tools = make_tools(root)
    result = await shell(
        tools,
        "pwd; cat src/app.py; echo 'import os' >> hooks/tools.py; echo append=$?; "
        "touch new.py; echo touch=$?; mkdir d; echo mkdir=$?; rm fim.yaml; echo rm=$?",
    )
    out = result.content
    assert "/project\nprint('the project source')" in out, out
    for step in ("append", "touch", "mkdir", "rm"):
        assert f"{step}=1" in out, out
    assert "Read-only file system" in out
    assert (root / "hooks" / "tools.py").read_text() == "def f() -> int:\n    return 1\n"
    assert (root / "fim.yaml").exists() and not (root / "new.py").exists()
    assert not (root / "d").exists()


@needs_bwrap
async def test_files_are_written_in_home_the_sandboxs_scratch(tmp_path: Path, mode: str) -> None:
    """The writable scratch stays as before: HOME, and where file_ops finds the files."""
    root = make_project(tmp_path / "p")
    tools = make_tools(root)
    result = await shell(tools, 'wc -l < src/app.py > "$HOME/lines.txt" && echo $HOME')
    scratch = (root / ".fim" / "sandbox" / "scratch").resolve()
    assert result.content.splitlines()[2] == str(scratch), result.content
    assert (scratch / "lines.txt").read_text().strip() == "1"


@needs_bwrap
async def test_fims_state_is_hidden_in_the_project(tmp_path: Path, mode: str) -> None:
    """.fim/ (the state store with every tenant's runs, the sandbox folders, another API
    key's files) is an empty read-only folder, directly or through the project's links."""
    root = make_project(tmp_path / "p")
    tools = make_tools(root)
    result = await shell(
        tools,
        "ls -A /project/.fim | wc -l; cat .fim/state.db store store-rel; ls keys; "
        "touch .fim/planted; echo planted=$?; "
        f"grep -rl -e {STATE[:9]}-{STATE[10:]} -e {OTHER_KEY[:9]}-{OTHER_KEY[10:]} "
        f"/project {tmp_path} $HOME 2>/dev/null; echo searched",
    )
    out = result.content
    stdout = out.split("--- stdout ---\n")[1].split("--- stderr ---")[0].split()
    assert stdout == ["0", "keys", "planted=1", "searched"], out  # grep found no file
    assert STATE not in out and OTHER_KEY not in out
    assert "cat: .fim/state.db: No such file or directory" in out
    assert "touch: cannot touch '.fim/planted': Read-only file system" in out
    assert not (root / ".fim" / "planted").exists()


@needs_bwrap
async def test_on_a_fresh_project_the_folders_fim_makes_during_the_call_stay_hidden(
    tmp_path: Path, mode: str
) -> None:
    """No .fim/ yet (the first call of `fim run` comes before the store is written): the
    call's own sandbox folder, made as it starts, and another key's folder made during it
    would show through the live bind."""
    root = make_project(tmp_path / "p", "name: p\nsandbox: box\n")
    shutil.rmtree(root / ".fim")
    tools = make_tools(root)
    result = await shell(tools, "find /project/.fim /project/box /project/box-keys -mindepth 1")
    assert result.content == "[exit code 0]\n(no output)", result.content
    for folder in (".fim", "box", "box-keys"):
        assert (root / folder).stat().st_mode & 0o777 == 0o700


@needs_bwrap
async def test_symlinks_in_the_project_do_not_reach_host_files(tmp_path: Path, mode: str) -> None:
    """A link to /etc/shadow, to /root, or to the store's host path resolves in the
    sandbox's own tree, where none of them exists."""
    root = make_project(tmp_path / "p")
    (tmp_path / "outside.txt").write_text("outside the project\n")
    (root / "up").symlink_to("../outside.txt")
    tools = make_tools(root)
    result = await shell(tools, "cat shadow store up /etc/shadow; ls -A root-home/; echo done")
    out, err = streams(result)
    assert err == [
        f"cat: {name}: No such file or directory"
        for name in ("shadow", "store", "up", "/etc/shadow")
    ], result.content
    assert "root:" not in result.content and STATE not in result.content
    # /root in the sandbox holds at most the folders leading to the Python fim runs on
    python_homes = {
        Path(p).parts[2] for p in (sys.prefix, sys.base_prefix) if Path(p).parts[1:2] == ("root",)
    }
    assert set(out[:-1]) <= python_homes and out[-1] == "done"


@needs_bwrap
async def test_a_sandbox_folder_in_the_project_root_is_hidden_with_its_keys(
    tmp_path: Path, mode: str
) -> None:
    """fim.yaml `sandbox: box`: the sandbox folder and `box-keys` (every API key's files)
    are children of the project; a keyed run still writes its own scratch and reads no
    other key's (nor its own folder through /project)."""
    root = make_project(tmp_path / "p", "name: p\nsandbox: box\n")
    other = key_folder(root / "box", "another-key") / "scratch"
    other.mkdir(parents=True)
    (other / "notes.txt").write_text(OTHER_KEY)
    (root / "box" / "scratch").mkdir(parents=True)
    (root / "box" / "scratch" / "plain.txt").write_text(OTHER_KEY)
    tools = make_tools(root, owner="my-key")
    result = await shell(
        tools,
        'echo mine > "$HOME/mine.txt"; find /project/box /project/box-keys -mindepth 1 | wc -l; '
        "cat /project/box-keys/*/scratch/notes.txt /project/box/scratch/plain.txt; echo done",
    )
    out, err = streams(result)
    assert OTHER_KEY not in result.content
    assert out == ["0", "done"], result.content  # both folders empty
    assert len(err) == 2 and all("No such file or directory" in line for line in err)
    mine = key_folder(root / "box", "my-key") / "scratch" / "mine.txt"
    assert mine.read_text() == "mine\n"


@needs_bwrap
async def test_a_sandbox_folder_that_is_the_project_hides_the_whole_project(
    tmp_path: Path, mode: str
) -> None:
    """`sandbox: .`: the project IS fim's sandbox folder; nothing of it is shown."""
    root = make_project(tmp_path / "p", "name: p\nsandbox: .\n")
    tools = make_tools(root)
    result = await shell(tools, "ls -A /project | wc -l; cat /project/.fim/state.db")
    out, _ = streams(result)
    assert out == ["0"] and STATE not in result.content, result.content


@needs_bwrap
async def test_python_exec_reads_the_project_and_cannot_write_it(tmp_path: Path, mode: str) -> None:
    root = make_project(tmp_path / "p")
    tools = make_tools(root)
    code = (
        "import os\n"
        "print(os.getcwd(), open('src/app.py').read().strip())\n"
        "try:\n"
        "    open('hooks/evil.py', 'w')\n"
        "except OSError as exc:\n"
        "    print('refused', exc.strerror)\n"
        "open(os.path.join(os.environ['HOME'], 'out.txt'), 'w').write('ok')\n"
    )
    result = await python(tools, code)
    assert "/project print('the project source')" in result.content, result.content
    assert "refused Read-only file system" in result.content
    assert not (root / "hooks" / "evil.py").exists()


@needs_bwrap
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
async def test_git_works_on_the_repository(tmp_path: Path, mode: str) -> None:
    """What a Claude Code user adds `shell` for: `git log` and `git status` on the repo."""
    root = make_project(tmp_path / "p")
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@x", "HOME": str(tmp_path)}
    env |= {"GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@x"}
    for argv in (["init", "-q"], ["add", "src"], ["commit", "-qm", "first commit"]):
        subprocess.run(["git", *argv], cwd=root, env=env, check=True)
    subprocess.run(["chmod", "-R", "a+rX", str(root / ".git")], check=True)
    tools = make_tools(root)
    result = await shell(tools, "git log --format=%s; git status --short src")
    assert "first commit" in result.content, result.content


@needs_bwrap
async def test_without_the_setting_the_project_is_not_in_the_sandbox(tmp_path: Path) -> None:
    """The default (`project: none`) is unchanged: scratch is the working directory."""
    root = make_project(tmp_path / "p")
    tools = make_tools(root, sandbox={})
    result = await shell(tools, "pwd; ls /project")
    assert result.content.splitlines()[2].endswith("/.fim/sandbox/scratch"), result.content
    assert "No such file or directory" in result.content


def test_the_tool_descriptions_say_where_the_project_is_and_where_to_write(
    tmp_path: Path,
) -> None:
    root = make_project(tmp_path / "p")
    registry = make_tools(root)
    for name in ("shell", "python_exec"):
        tool = registry.get(name)
        assert tool is not None
        assert "/project, read-only, the working directory" in tool.description
        assert "write files in $HOME" in tool.description


def _validate(root: Path, *extra: str) -> Any:
    return CliRunner().invoke(app, ["validate", "--project", str(root), *extra])


def test_validate_accepts_project_read_and_suggests_the_key_for_a_typo(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text("name: p\n")
    agent = root / "agents" / "coder.yaml"
    agent.write_text("model: openai/gpt-4o-mini\ntools: [shell]\nsandbox:\n  project: read\n")
    assert _validate(root).exit_code == 0
    agent.write_text("model: openai/gpt-4o-mini\ntools: [shell]\nsandbox:\n  projct: read\n")
    typo = _validate(root)
    assert typo.exit_code != 0
    assert "agents/coder.yaml:4:3:" in typo.output and "did you mean 'project'" in typo.output
    agent.write_text("model: openai/gpt-4o-mini\ntools: [shell]\nsandbox:\n  project: write\n")
    write = _validate(root)
    assert write.exit_code != 0 and "agents/coder.yaml:4:" in write.output


def test_the_json_schema_offers_none_and_read_only() -> None:
    schema = AgentDecl.model_json_schema()
    settings = schema["$defs"]["SandboxSettings"]["properties"]["project"]
    assert settings["enum"] == ["none", "read"] and settings["default"] == "none"
