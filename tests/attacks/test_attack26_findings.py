"""Attack round 26: guarantees across engines and surfaces that tests check in one mode
(`fim eval`, the DAG engine, workflows, background runs). Each confirmed gap is pinned here
as a strict xfail asserting the safe behaviour (`/work/notes/attack-26.md` has the
reproduction and the fix location).

- A cassette `fim eval --record` writes is masked with the snapshot's secrets only
  (`Cassette(path, mode, snapshot.masker)`), while its reports use every secret the process
  knows (`fim.masking.known`): the provider key fim took from `OPENAI_API_KEY`, a
  SessionStart export, a hook's `env:` pass-through. A tool result holding one is masked in
  the report and written raw into the committed cassette.
- A `python:` assertion may name any callable attribute of a hooks module, dunders
  included: `python: policy:__setattr__` (a CSV cell, data) is called as
  `module.__setattr__(output, context)`, so the model's output names a global of a pinned
  hooks module and the eval process replaces it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.errors import ConfigError
from fim.eval.report import json_report
from fim.eval.runner import EvalRunner
from fim.masking import remember

FIM_YAML = (
    "name: a26\nstate: sqlite:///.fim/state.db\n"
    "models: {general: scripted:s.yaml}\ntool_selection: {enabled: false}\n"
)


def write(root: Path, files: dict[str, Any]) -> Path:
    """Write a project: a dict or list body as JSON (YAML reads it), a string as it is."""
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body if isinstance(body, str) else json.dumps(body))
    return root


# ------------------------------------------------------------- #1 cassettes

PROVIDER_KEY = "sk-proj-attack26-provider-key-0123456789"
"""A provider key fim resolved from the environment (`fim.llm.base.api_key` remembers it:
no declaration names it, so it is not among the snapshot's secrets)."""

PROBE = f'''
def debug() -> str:
    """Show the client configuration."""
    return "client config: api_key={PROVIDER_KEY}"
'''


def test_a_recorded_cassette_masks_every_secret_the_report_masks(tmp_path: Path) -> None:
    """`--record` stores tool results "masked the same way" as the reports, for a file that
    is committed. The report masks the provider key (`known()`); the cassette must too."""
    root = write(
        tmp_path,
        {
            "fim.yaml": FIM_YAML,
            "s.yaml": [{"tool_call": {"name": "debug", "arguments": {}}}, {"text": "done"}],
            "hooks/probe.py": PROBE,
            "agents/a.yaml": "description: d\nmodel: general\ntools: ['probe:debug']\n",
            "evals/s.yaml": {
                "agent": "a",
                "cases": [{"name": "c", "input": "go", "expect": [{"contains": "done"}]}],
            },
        },
    )
    remember([PROVIDER_KEY])  # as a live `--record` run's preflight does with OPENAI_API_KEY
    report = asyncio.run(EvalRunner(compile_project(root), mode="record").run())
    assert report.ok and PROVIDER_KEY not in json.dumps(json_report(report))  # the report holds
    recorded = [p.read_text() for p in (root / "evals" / ".cassettes").rglob("*.json")]
    assert recorded and all("api_key=***" in body for body in recorded), recorded
    assert not any(PROVIDER_KEY in body for body in recorded)  # today: written raw


# ------------------------------------------------------------- #2 python: assertions

POLICY = """
BLOCKED = {"drop", "delete"}


def polite(output, context):
    return True
"""


def test_a_python_assertion_cannot_rebind_a_hooks_module_global(tmp_path: Path) -> None:
    """A case names `policy:__setattr__`; the (scripted or recorded) output `BLOCKED` picks
    the global. Safe: only a function the module defines is an assertion (`fim validate`
    and the eval refuse it), and the module's globals are untouched."""
    root = write(
        tmp_path,
        {
            "fim.yaml": FIM_YAML,
            "s.yaml": [{"text": "BLOCKED"}],
            "hooks/policy.py": POLICY,
            "agents/a.yaml": "description: d\nmodel: general\ntools: [calculator]\n",
            "evals/s.yaml": {
                "agent": "a",
                "cases": [
                    {"name": "c", "input": "go", "expect": [{"python": "policy:__setattr__"}]}
                ],
            },
        },
    )
    # before: compiled, and the eval set policy.BLOCKED to the case's context dict
    with pytest.raises(ConfigError, match="has no function '__setattr__'"):
        compile_project(root)
