"""Start-up work `fim validate` and `fim eval` do not pay for (issue 25 point 3).

Not timed: each test states what the start-up path must not do, as a fact about the
modules and models, so a change that puts the cost back fails on any machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

import fim.config.schema
from fim.config.schema.base import empty_list

REPO = Path(__file__).resolve().parents[2]


def _declaration_models() -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = []
    pending = [
        v
        for v in vars(fim.config.schema).values()
        if isinstance(v, type) and issubclass(v, BaseModel)
    ]
    while pending:
        model = pending.pop()
        if model in seen:
            continue
        seen.append(model)
        pending.extend(model.__subclasses__())
    return seen


def test_declaration_list_fields_default_through_a_python_function() -> None:
    """pydantic reads every default factory's signature; `list`'s is parsed from C text
    (~0.1 ms a field), a Python function's costs microseconds."""
    builtin_factories = [
        f"{model.__name__}.{name}"
        for model in _declaration_models()
        if model.__module__.startswith(("fim.config.schema", "fim.workflows.node_types"))
        for name, field in model.model_fields.items()
        if field.default_factory is list
    ]
    assert builtin_factories == []
    assert empty_list() == [] and empty_list() is not empty_list()


def _run(code: str, cwd: Path = REPO) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_validate_builds_no_validator_for_a_hooks_output() -> None:
    """The example project has a command hook: validate builds it, but reads no output."""
    code = (
        "import sys\n"
        "sys.argv = ['fim', 'validate']\n"
        "import fim.cli\n"
        "try:\n    fim.cli.main()\nexcept SystemExit:\n    pass\n"
        "from fim.hooks.command_output import HookOutput\n"
        "print(HookOutput.__pydantic_complete__)\n"
    )
    assert _run(code) == "False"


def test_a_hooks_json_output_is_still_validated_strictly() -> None:
    from fim.hooks.command_output import HookOutput

    assert HookOutput.model_validate({"decision": "block", "reason": "no"}).decision == "block"
    try:
        HookOutput.model_validate({"decision": "block", "suppressOutput": "yes"})
    except ValueError as exc:
        assert "suppressOutput" in str(exc)
    else:
        raise AssertionError("a string for a strict bool was accepted")


def test_eval_reporting_loads_xml_only_for_junit() -> None:
    code = (
        "import sys\n"
        "import fim.eval.report\n"
        "before = 'xml.etree.ElementTree' in sys.modules\n"
        "from fim.eval.results import EvalReport\n"
        'xml = fim.eval.report.junit_xml(EvalReport([], 0.0, "replay"))\n'
        "print(before, xml.startswith('<?xml'))\n"
    )
    assert _run(code) == "False True"


def test_the_tool_isolate_loads_multiprocessing_on_its_first_pool() -> None:
    code = "import sys\nimport fim.tools.isolate\nprint('multiprocessing' in sys.modules)\n"
    assert _run(code) == "False"


def test_fim_serve_builds_the_hook_output_validators_at_start_up() -> None:
    """What `fim validate` defers, a long-lived server builds before its first request
    (`fim.server` calls this after `fim.events.build_validators`)."""
    from fim.hooks.command_output import HookOutput, build_validators

    build_validators()
    assert HookOutput.__pydantic_complete__
