"""A Claude Code hook reads `tool_input.file_path` absolute, as Claude Code gives it: a
formatter or lint hook copied from a Claude Code project (interop-cc: the SDK repo's ruff
hook) got `src/x.py`, relative to nothing it knew, while `file_ops` wrote under the run's
sandbox folder, so it checked another file or none. An `updatedInput` path under that
folder goes back to `file_ops` relative to it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from typer.testing import CliRunner

SCRIPT = """\
- tool_calls: [{name: file_ops, arguments: {operation: write, path: src/x.py, content: "x=1"}}]
- text: done
"""

FORMATTER = f"""#!{sys.executable}
import json, pathlib, sys
event = json.load(sys.stdin)
path = pathlib.Path(event["tool_input"]["file_path"])
seen = {{"path": str(path), "absolute": path.is_absolute(), "exists": path.is_file()}}
pathlib.Path("seen-" + event["hook_event_name"]).write_text(json.dumps(seen))
"""

MOVER = f"""#!{sys.executable}
import json, pathlib, sys
event = json.load(sys.stdin)
moved = str(pathlib.Path(event["tool_input"]["file_path"]).with_name("y.py"))
print(json.dumps({{"hookSpecificOutput": {{"hookEventName": "PreToolUse",
    "permissionDecision": "allow", "updatedInput": {{"file_path": moved, "content": "y=2"}}}}}}))
"""


def project(root: Path, hooks: dict[str, str]) -> Path:
    for folder in ("agents", "scripts", ".claude/hooks"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "fim.yaml").write_text(
        "name: p\nmodels: {general: scripted:scripts/s.yaml}\nstate: sqlite:///.fim/state.db\n"
    )
    (root / "scripts" / "s.yaml").write_text(SCRIPT)
    listed = []
    for event, text in hooks.items():
        script = root / ".claude" / "hooks" / f"{event}.py"
        script.write_text(text)
        script.chmod(0o755)
        listed.append(f"{{event: {event}, matcher: Write, command: .claude/hooks/{event}.py}}")
    (root / "agents" / "dev.yaml").write_text(
        "description: d\nmodel: general\ntools: [file_ops]\nhooks: [" + ", ".join(listed) + "]\n"
    )
    return root


def run(root: Path) -> None:
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    result = CliRunner().invoke(app, ["run", "dev", "go", "--project", str(root)])
    assert result.exit_code == 0, result.stdout + result.stderr


def test_a_formatter_hook_gets_the_absolute_path_of_the_file_written(tmp_path: Path) -> None:
    root = project(tmp_path, {"PreToolUse": FORMATTER, "PostToolUse": FORMATTER})
    run(root)
    written = root / ".fim" / "sandbox" / "src" / "x.py"
    assert written.read_text() == "x=1"
    before = json.loads((root / "seen-PreToolUse").read_text())
    after = json.loads((root / "seen-PostToolUse").read_text())
    assert before == {"path": str(written.resolve()), "absolute": True, "exists": False}
    assert after == {"path": str(written.resolve()), "absolute": True, "exists": True}


def test_an_absolute_updated_path_inside_the_folder_is_written_there(tmp_path: Path) -> None:
    root = project(tmp_path, {"PreToolUse": MOVER})
    run(root)
    folder = root / ".fim" / "sandbox" / "src"
    assert (folder / "y.py").read_text() == "y=2" and not (folder / "x.py").exists()
