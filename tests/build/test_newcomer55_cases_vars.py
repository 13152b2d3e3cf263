"""Newcomer 55, finding 7: a case with no vars is sent as written, so a `{{ order }}` in it
reaches the model as braces. A CSV that lost its var column, or a YAML case whose `vars:`
was deleted, used to validate "ok"; `fim validate` now warns at the input's line (the
cell, in a CSV), and at an empty CSV cell of a var the input reads (`Where is ?`).
Warnings: `--strict` fails on them; a suite's `default_vars` gives every case vars."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.eval_projects import eval_project
from tests.inprocess_cli import run_fim

RAW = "braces meant as text need a var too: then write {% raw %}...{% endraw %}"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = eval_project(tmp_path / "p")
    evals = root / "evals"
    (evals / "tests").mkdir()
    (evals / "more.csv").write_text(
        "name,input,__expected1\nwhere is,Where is {{ order }}?,icontains: processing\n"
    )
    (evals / "cells.csv").write_text(
        "name,input,order\nempty,Where is {{ order }}?,\nfull,Where is {{ order }}?,A1\n"
    )
    (evals / "tests" / "more.yaml").write_text("- name: listed\n  input: 'Hi {{ name }}'\n")
    (evals / "more.jsonl").write_text('{"name": "line", "input": "{% if x %}y{% endif %}"}\n')
    (evals / "support.yaml").write_text(
        "agent: demo\n"
        "cases:\n"
        "  - name: migrated\n"
        '    input: "{{ question }}"\n'
        "  - {name: plain, input: no braces here}\n"
        "  - more.csv\n"
        "  - cells.csv\n"
        "  - tests/more.yaml\n"
        "  - more.jsonl\n"
    )
    return root


def validate(root: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return run_fim("validate", "--project", str(root), *flags, cwd=root, timeout=60)


def warnings(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in (result.stdout + result.stderr).splitlines() if "warning:" in line]


def test_braces_in_a_case_without_vars_are_warned_at_the_input(project: Path) -> None:
    result = validate(project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert warnings(result) == [
        "evals/cells.csv:2:29: warning: the 'order' cell is empty, so the input's "
        "{{ order }} is blank (fill in the cell, or leave the var out of this row's input)",
        "evals/more.csv:2:10: warning: '{{ order }}' is sent literally: this case has no vars "
        f"(add the 'order' column; {RAW})",
        "evals/more.jsonl:1:27: warning: '{% if x %}' is sent literally: this case has no "
        f"vars (add `vars: {{x: ...}}`; {RAW})",
        "evals/support.yaml:4:12: warning: '{{ question }}' is sent literally: this case has "
        f"no vars (add `vars: {{question: ...}}`; {RAW})",
        "evals/tests/more.yaml:2:10: warning: '{{ name }}' is sent literally: this case has no "
        f"vars (add `vars: {{name: ...}}`; {RAW})",
    ]
    assert validate(project, "--strict").returncode != 0


def test_default_vars_give_every_case_vars_and_end_the_warnings(project: Path) -> None:
    text = (project / "evals" / "support.yaml").read_text()
    (project / "evals" / "support.yaml").write_text(
        text.replace(
            "agent: demo\n", "agent: demo\ndefault_vars: {question: hi, order: A1, name: Ann}\n"
        )
        .replace("  - more.jsonl\n", "")
        .replace("  - cells.csv\n", "")
    )
    result = validate(project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert warnings(result) == []
