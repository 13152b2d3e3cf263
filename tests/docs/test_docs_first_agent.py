"""The README's "Use fim" and "Your first agent in 5 minutes", followed on a fresh project.

Every line of those sections' bash blocks must be a step below, in README order: a command
the README adds or drops without its check here fails the first test. The YAML blocks of
the walkthrough headed `# <path>` are the files a reader writes, written here exactly as
the README shows them, at their place between the commands. Offline: the steps that need
a real model run without a key and must stop in one line that says what to set.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

README = Path(__file__).resolve().parents[2] / "README.md"
USE = "## Use fim\n"
WALKTHROUGH = "## Your first agent in 5 minutes\n"
KEY = "missing API key for openai/gpt-4o-mini (set OPENAI_API_KEY"


def section(heading: str) -> str:
    text = README.read_text(encoding="utf-8")
    assert heading in text, f"README lost its '{heading.strip()}' section"
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def blocks(body: str) -> list[tuple[str, str]]:
    """(language, text) of every fenced block, in order."""
    return re.findall(r"```(\w+)\n(.*?)```", body, re.S)


def commands(text: str) -> list[str]:
    """The command of every line of a bash block (comments and blank lines dropped)."""
    lines = [line.partition("  #")[0].strip() for line in text.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


@dataclass
class Reader:
    """Someone following the walkthrough: where they are, what they typed."""

    home: Path
    monkeypatch: pytest.MonkeyPatch
    runner: CliRunner = field(default_factory=CliRunner)

    def fim(self, *args: str, code: int | None = 0) -> str:
        """`fim ARGS` in-process; asserts the exit code (None: any failure)."""
        from fim.cli import app

        result = self.runner.invoke(app, list(args), catch_exceptions=False)
        output = result.stdout + result.stderr
        ok = result.exit_code != 0 if code is None else result.exit_code == code
        assert ok, f"fim {' '.join(args)} -> {result.exit_code}\n{output}"
        return output

    @property
    def project(self) -> Path:
        return Path.cwd()


Step = Callable[[Reader], None]


def init(reader: Reader) -> None:
    out = reader.fim("init", "my-project")
    assert out.startswith("created ")
    reader.monkeypatch.chdir(reader.home / "my-project")


def validates(reader: Reader) -> None:
    assert reader.fim("validate").startswith("ok: 1 agent, 1 connector, 1 skill, 1 workflow")


def validates_and_names_a_typo(reader: Reader) -> None:
    """The second `fim validate`, and the typo the README shows it catching."""
    validates(reader)
    said = re.search(
        r"`tools: \[calculator, datetme\]` would have given\s+`([^`]+)`", section(WALKTHROUGH)
    )
    assert said, "README lost its example of a typo"
    agent = reader.project / "agents" / "assistant.yaml"
    good = agent.read_text()
    agent.write_text(good.replace("tools: [calculator, datetime]", "tools: [calculator, datetme]"))
    try:
        assert said.group(1) in reader.fim("validate", code=1)
    finally:
        agent.write_text(good)


def scaffold_runs(reader: Reader) -> None:
    out = reader.fim("run", "assistant", "What is 6*7?", "-v")
    assert '→ calculator {"expression": "6*7"}' in out and "6 \u00d7 7 = 42" in out


def shows_prompt(reader: Reader) -> None:
    out = reader.fim("show", "agent", "assistant", "--prompt")
    assert "You are the tip calculator of my-project." in out
    assert "# calculator" in out and "# datetime" in out


def tip_runs(reader: Reader) -> None:
    out = reader.fim("run", "assistant", "What is a 15% tip on 48?", "-v")
    assert re.search(r"← calculator \(\d+ ms\) 7\.2\n", out)
    assert "A 15% tip on 48 is 7.20." in out


def session_continues(reader: Reader) -> None:
    """`--session NAME` keeps the conversation: the same command again continues it."""
    for _ in range(2):
        assert "A 15% tip on 48 is 7.20." in reader.fim(
            "run", "assistant", "--session", "tips", "And on 60?"
        )
    shown = reader.fim("sessions", "show", "tips")
    assert shown.count("user: And on 60?") == 2, shown


def eval_passes(reader: Reader) -> None:
    out = reader.fim("eval")
    assert re.search(r"assistant .* PASS", out), out


def switches_model(reader: Reader) -> None:
    """Step 4 in prose: `model: general` in agents/assistant.yaml. The key stays unset."""
    assert "write `model: general`" in section(WALKTHROUGH)
    agent = reader.project / "agents" / "assistant.yaml"
    text, count = re.subn(r"(?m)^model: .*$", "model: general", agent.read_text())
    assert count == 1
    agent.write_text(text)


def needs_a_key(*args: str) -> Step:
    def check(reader: Reader) -> None:
        out = reader.fim(*args, code=1)
        assert KEY in out and "Traceback" not in out
        assert len(out.strip().splitlines()) == 1, out

    return check


def record_needs_a_key(reader: Reader) -> None:
    """Recording calls the model: without a key the case cannot run (how the exit code
    classes that is `fim eval`'s own business, tested in tests/eval/test_eval_cli.py)."""
    out = reader.fim("eval", "--record", code=None)
    assert KEY in out and "Traceback" not in out


def eval_skips_without_cassette(reader: Reader) -> None:
    out = reader.fim("eval", code=1)
    assert re.search(r"assistant .* SKIP", out) and "no cassette recorded" in out
    assert "nothing was tested" in out


SETUP = "(set-up: what a reader runs once; .ci/run installs the dev extra instead)"

USE_STEPS = [
    ("python3 -m venv .venv && . .venv/bin/activate", SETUP),
    ("pip install -e .", SETUP),
]

STEPS: list[tuple[str, Step]] = [
    ("fim init my-project && cd my-project", init),
    ("fim validate", validates),
    ('fim run assistant "What is 6*7?" -v', scaffold_runs),
    ("fim validate", validates_and_names_a_typo),
    ("fim show agent assistant --prompt", shows_prompt),
    ('fim run assistant "What is a 15% tip on 48?" -v', tip_runs),
    ('fim run assistant --session tips "And on 60?"', session_continues),
    ("fim eval", eval_passes),
    ("export OPENAI_API_KEY=sk-...", switches_model),
    (
        'fim run assistant "What is a 15% tip on 48?"',
        needs_a_key("run", "assistant", "What is a 15% tip on 48?"),
    ),
    ("fim eval --record", record_needs_a_key),
    ("fim eval", eval_skips_without_cassette),
]


def walkthrough() -> Iterator[tuple[str, str]]:
    """("command", text) and ("file", path) items in README order; files are YAML blocks
    whose first line is `# <path>`."""
    for language, text in blocks(section(WALKTHROUGH)):
        if language == "bash":
            for command in commands(text):
                yield "command", command
        elif language == "yaml":
            first = text.splitlines()[0]
            assert re.fullmatch(r"# [\w./-]+", first), f"a YAML block names no file: {first}"
            yield "file", text


def test_every_command_of_the_walkthrough_is_a_step() -> None:
    use = [c for lang, text in blocks(section(USE)) if lang == "bash" for c in commands(text)]
    assert use == [command for command, _ in USE_STEPS]
    walked = [text for kind, text in walkthrough() if kind == "command"]
    assert walked == [command for command, _ in STEPS]


@pytest.fixture
def reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Reader:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "FIM_MODEL", "FIM_FAST_MODEL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    return Reader(home=tmp_path, monkeypatch=monkeypatch)


def test_the_walkthrough_does_what_it_says(reader: Reader) -> None:
    steps = iter(STEPS)
    for kind, text in walkthrough():
        if kind == "file":
            path = reader.project / text.splitlines()[0].removeprefix("# ")
            assert path.is_file(), f"the README replaces {path.name}, which fim init wrote"
            path.write_text(text, encoding="utf-8")
            continue
        command, step = next(steps)
        assert command == text
        step(reader)
    assert not os.environ.get("OPENAI_API_KEY")  # offline throughout
