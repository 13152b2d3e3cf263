"""Where `fim validate` says a mistake in an agent's `instructions:` is (newcomer-48 #6).

- In a literal block scalar (`instructions: |`) the template's lines are the file's, so a
  Jinja error is reported at its line in the file (`agents/a.yaml:7:3`), where an editor
  or a GitHub annotation jumps, not at the `instructions:` key with a template line.
- A folded block (`>`) joins lines, so there the error stays at the key, with the
  template line as a hint, as before.
- The same holds for any template `fim validate` parses, a workflow's included.
- `now` is text (ISO 8601), not a datetime: using it as one (`now.strftime(...)`) says so
  and how to take the date or the time out of it.
"""

from __future__ import annotations

from pathlib import Path

from fim.build.compile import compile_project
from fim.build.instructions import render
from tests.inprocess_cli import run_fim

FIM_YAML = "name: shop\nstate: sqlite:///.fim/state.db\n"
STRFTIME_HINT = (
    "(`now` is text, not a datetime: the run's start in UTC as ISO 8601, e.g. "
    "2026-05-17T14:30:00+00:00; {{ now[:10] }} is the date, {{ now[11:16] }} the time, and "
    "the datetime tool gives the agent a weekday or other formats)"
)


def validate(tmp_path: Path, agent: str) -> list[str]:
    """`fim validate`'s problem lines for a project whose one agent file is `agent`."""
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(FIM_YAML)
    (root / "agents" / "a.yaml").write_text(agent)
    done = run_fim("validate", "-p", str(root), env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 1, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if line.startswith("agents/")]


def test_a_syntax_error_in_a_literal_block_is_at_its_line_in_the_file(tmp_path: Path) -> None:
    agent = (
        "description: helps\n"  # 1
        "model: openai/gpt-4o-mini\n"  # 2
        "instructions: |\n"  # 3
        "  You are helpful.\n"  # 4   template line 1
        "\n"  # 5                      template line 2
        "  Today:\n"  # 6              template line 3
        "    {% if now %} It is {{ now }}.\n"  # 7   template line 4 (never closed)
    )
    assert validate(tmp_path, agent) == [
        "agents/a.yaml:7:5: invalid Jinja2 template: Unexpected end of template. Jinja was "
        "looking for the following tags: 'elif' or 'else' or 'endif'. The innermost block "
        "that needs to be closed is 'if'. (check {{ }} / {% %} pairs and filter names)"
    ]


def test_now_used_as_a_datetime_is_at_its_line_and_column_saying_what_now_is(
    tmp_path: Path,
) -> None:
    agent = (
        "description: helps\n"
        "model: openai/gpt-4o-mini\n"
        "instructions: |\n"
        "  You are helpful.\n"
        "  It is {{ now.strftime('%A') }}.\n"  # line 5; `strftime` at column 16
    )
    assert validate(tmp_path, agent) == [
        f"agents/a.yaml:5:16: instructions: 'now' has no attribute 'strftime' {STRFTIME_HINT}"
    ]


def test_a_folded_block_keeps_the_error_at_the_key_with_the_template_line(
    tmp_path: Path,
) -> None:
    agent = (
        "description: helps\n"
        "model: openai/gpt-4o-mini\n"
        "instructions: >\n"
        "  You are\n"
        "  helpful.\n"
        "\n"
        "  It is {{ now.year }}.\n"  # folded: template line 2, file line 7
    )
    assert validate(tmp_path, agent) == [
        "agents/a.yaml:3:15: instructions: 'now' has no attribute 'year' at template line 2 "
        + STRFTIME_HINT
    ]


def test_a_workflow_templates_syntax_error_in_a_literal_block_is_at_its_line(
    tmp_path: Path,
) -> None:
    root = tmp_path / "p"
    (root / "workflows").mkdir(parents=True)
    (root / "fim.yaml").write_text(FIM_YAML)
    (root / "workflows" / "w.yaml").write_text(
        "inputs:\n"
        "  order_id: {type: string}\n"
        "nodes:\n"
        "  ask:\n"
        "    type: human\n"
        "    prompt: |\n"
        "      Approve order {{ inputs.order_id }?\n"  # line 7: `}` for `}}`
        "      Say yes or no.\n"
    )
    done = run_fim("validate", "-p", str(root), env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 1
    assert done.stdout.startswith("workflows/w.yaml:7:7: invalid Jinja2 template: "), done.stdout


def test_the_hint_for_now_renders_as_it_says(tmp_path: Path) -> None:
    """`{{ now[:10] }}` is the date and `{{ now[11:16] }}` the time, as the hint says."""
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(FIM_YAML)
    (root / "agents" / "a.yaml").write_text(
        "description: helps\nmodel: openai/gpt-4o-mini\n"
        "instructions: 'On {{ now[:10] }} at {{ now[11:16] }}.'\n"
    )
    snapshot = compile_project(root)
    agent = snapshot.agent("a")
    text = render(root, snapshot.project, agent, {}, "2026-05-17T14:30:00+00:00")
    assert text == "On 2026-05-17 at 14:30."


def test_an_undefined_name_in_a_literal_block_is_at_its_line_and_column(tmp_path: Path) -> None:
    """newcomer-49: plain `{{ a.b }}` instructions are checked without rendering, and such a
    mistake was reported at the `instructions:` key (3:15), not where the name is."""
    agent = (
        "description: helps\n"  # 1
        "model: openai/gpt-4o-mini\n"  # 2
        "instructions: |\n"  # 3
        "  You are the agent of {{ project.name }}.\n"  # 4
        "  Be brief.\n"  # 5
        "  Today is {{ now }} for {{ projct.name }}.\n"  # 6
    )
    assert validate(tmp_path, agent) == [
        "agents/a.yaml:6:29: instructions: 'projct' is undefined (did you mean 'project'?)"
    ]
    attribute = agent.replace("{{ project.name }}", "{{ project.nme }}").replace(
        "projct", "project"
    )
    assert validate(tmp_path / "2", attribute) == [
        "agents/a.yaml:4:35: instructions: 'project' has no attribute 'nme' (did you mean 'name'?)"
    ]
