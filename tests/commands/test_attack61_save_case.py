"""`fim runs save-case` writes only the project's own suite, and writes it so that it reads
back (attack-61 F3, F5).

- The suite (`evals/<agent>.yaml` or `--suite`) must be a file under the project's
  `evals/` folder: a symbolic link there, a linked `evals/` folder, or a path outside the
  folder is refused with exit code 1 and one line naming the path; nothing is written
  outside the project and the link stays as it was. The file is replaced whole (a
  temporary file beside it, moved over it), so nothing is ever written through a link.
- An input or answer holding a control or line-separator character (U+2028, U+2029,
  U+0085, NUL, ESC, CR) is written double-quoted with escapes: the suite still parses,
  with fim's own YAML reader, and the case reads back exactly as the run had it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.commands.runs_case import append_case, run_case
from fim.config.yamlio import parse
from fim.errors import RunError

FILES = {
    "fim.yaml": 'name: a61\nstate: "sqlite:///.fim/state.db"\n',
    "u.script.yaml": 'default: [{text: "ok; touch PWN"}]\n',
    "agents/u.yaml": "description: u\nmodel: scripted:u.script.yaml\n",
}


def project(root: Path) -> Path:
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def fim(root: Path, *args: str) -> tuple[int, str]:
    """`fim ARGS -p ROOT`: its exit code and what it printed (stdout and stderr)."""
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    result = CliRunner().invoke(app, [*args, "-p", str(root)])
    return result.exit_code, result.stdout + result.stderr


@pytest.fixture
def ran(tmp_path: Path) -> Path:
    root = project(tmp_path / "p")
    assert fim(root, "run", "u", "summarise my tickets")[0] == 0
    return root


def test_a_suite_that_is_a_link_to_a_file_outside_is_refused(ran: Path) -> None:
    outside = ran.parent / "dot_profile"
    (ran / "evals").mkdir()
    (ran / "evals/u.yaml").symlink_to(outside)
    code, out = fim(ran, "runs", "save-case", "last")
    assert code == 1
    assert "evals/u.yaml is a symbolic link" in out and "Traceback" not in out
    assert not outside.exists()
    assert (ran / "evals/u.yaml").is_symlink()


def test_a_link_to_an_existing_file_outside_is_left_unchanged(ran: Path) -> None:
    outside = ran.parent / "settings.yaml"
    outside.write_text("theme: dark\n")
    (ran / "evals").mkdir()
    (ran / "evals/u.yaml").symlink_to(outside)
    assert fim(ran, "runs", "save-case", "last")[0] == 1
    assert outside.read_text() == "theme: dark\n"


def test_a_linked_evals_folder_is_refused(ran: Path) -> None:
    elsewhere = ran.parent / "elsewhere"
    elsewhere.mkdir()
    (ran / "evals").symlink_to(elsewhere)
    code, out = fim(ran, "runs", "save-case", "last")
    assert code == 1 and "evals is a symbolic link" in out
    assert list(elsewhere.iterdir()) == []


def test_a_suite_named_outside_the_eval_folder_is_refused(ran: Path) -> None:
    for target in (ran.parent / "x.yaml", ran / "agents/x.yaml", ran / "evals/../x.yaml"):
        code, out = fim(ran, "runs", "save-case", "last", "--suite", str(target))
        assert code == 1 and "not in the project's eval folder" in out, target
        assert not (ran.parent / "x.yaml").exists() and not (ran / "x.yaml").exists()
        assert not (ran / "agents/x.yaml").exists()


def test_the_suite_is_still_written_under_evals(ran: Path) -> None:
    code, out = fim(ran, "runs", "save-case", "last", "--suite", str(ran / "evals/more.yaml"))
    assert code == 0, out
    assert (ran / "evals/more.yaml").read_text().startswith("agent: u\ncases:\n")
    assert [p.name for p in (ran / "evals").iterdir()] == ["more.yaml"]  # no temporary left


def test_appending_replaces_the_file_and_keeps_its_permissions(ran: Path) -> None:
    assert fim(ran, "runs", "save-case", "last")[0] == 0
    suite = ran / "evals/u.yaml"
    suite.chmod(0o640)
    assert fim(ran, "runs", "save-case", "last")[0] == 0
    assert suite.stat().st_mode & 0o777 == 0o640
    assert len(parse(suite.read_text(), "u.yaml").data["cases"]) == 2


HOSTILE = [  # each with a line break: a multi-line text was written as a literal block
    "x\u2028y\nz",
    "x\u2029y\nz",
    "a\x85b\nc",
    "nul\x00here\nthere",
    "esc\x1b[31mred\nplain",
    "x\r\ny",
    "lone\rcr\nlf",
    "  leading\n  and trailing  \n",
    "k\nlive: true",
]


@pytest.mark.parametrize("text", HOSTILE, ids=repr)
def test_a_hostile_input_and_answer_read_back_exactly(tmp_path: Path, text: str) -> None:
    suite = tmp_path / "u.yaml"
    append_case(suite, "u", run_case("r0", [{"type": "run_started", "input": "first"}], "a"), "")
    events = [
        {"type": "run_started", "input": text},
        {"type": "tool_call", "name": "echo", "call_id": "c1", "arguments": {"x": text}},
    ]
    case = run_case("r1", events, text)
    append_case(suite, "u", case, "u.yaml", "r1")
    cases = parse(suite.read_text(encoding="utf-8"), "u.yaml").data["cases"]
    assert cases[0]["input"] == "first"  # the suite's other cases still read
    assert cases[1]["input"] == text
    assert cases[1]["expect"][0] == {"tool_called": {"name": "echo", "args": {"x": text}}}
    assert cases[1]["expect"] == case["expect"]


def test_the_suite_with_hostile_cases_still_compiles(ran: Path) -> None:
    (ran / "evals").mkdir()
    suite = ran / "evals/u.yaml"
    for i, text in enumerate(HOSTILE):
        append_case(suite, "u", run_case(f"r{i}", [{"type": "run_started", "input": text}], "a"),
                    "evals/u.yaml", f"r{i}")  # fmt: skip
    cases = compile_project(ran).evals["u"].cases
    assert [c.input for c in cases] == HOSTILE


def test_a_case_that_would_not_read_back_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # deferred: the module whose check is replaced
    import fim.commands.runs_case as runs_case

    monkeypatch.setattr(runs_case, "_reads_back", lambda text, case: False)
    suite = tmp_path / "u.yaml"
    with pytest.raises(RunError, match="would not read back"):
        append_case(suite, "u", run_case("r1", [{"type": "run_started", "input": "x"}], "a"), "")
    assert not suite.exists()
