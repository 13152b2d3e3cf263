"""A project's Python tool that raises leaves where it raised on the run's `tool_result`
event (newcomer-53 #1): `at` names the innermost frame of the project's code
(`hooks/mytools.py:5 in _pick`, the helper the tool called, not the tool's own line) and
`traceback` keeps only the project's frames, paths relative to the project, the frames of
fim and of libraries counted as hidden, secrets masked. The model still reads only
`Error: tool 'x' failed: KeyError: 2`: a traceback names files and code, and is for the
developer. The trace gets OpenTelemetry's `exception` event on the tool's span."""

from __future__ import annotations

import json
from pathlib import Path

from fim.build.compile import compile_project
from fim.events import ToolResultEvent
from fim.project_frames import exception_attributes, raised_line
from fim.testing.otlp import Receiver
from fim.testing.runs import run_events

SECRET = "sk-n53-abcdefgh12345678"

TOOLS = f'''import json

from fim.tools import read_only


def _pick(orders: dict, key: int) -> dict:
    return orders[key]


@read_only
def lookup_order(id: int) -> dict:
    """Look up an order by its number."""
    orders = {{1: {{"item": "teapot"}}}}
    return _pick(orders, id)


def sign(text: str) -> str:
    """Sign a text with the service's key."""
    token = "{SECRET}"
    raise ValueError(f"the service refused {{token}}")


async def parse(text: str) -> dict:
    """Parse a JSON text."""
    return json.loads(text)
'''

SCRIPT = """\
- tool_calls:
    - {name: lookup_order, arguments: {id: 2}}
    - {name: sign, arguments: {text: hello}}
    - {name: parse, arguments: {text: "{"}}
- text: done
"""


def project(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "hooks").mkdir()
    (root / "fim.yaml").write_text(
        "name: p\nstate: sqlite:///.fim/state.db\ntool_selection: {enabled: false}\n"
        f"models: {{general: {{model: openai/x, api_key: {SECRET}}}}}\n"
    )
    (root / "hooks" / "mytools.py").write_text(TOOLS)
    (root / "s.yaml").write_text(SCRIPT)
    (root / "agents" / "a.yaml").write_text(
        "description: a\nmodel: scripted:s.yaml\n"
        "tools: [mytools:lookup_order, mytools:sign, mytools:parse]\n"
    )
    return root


async def results(tmp_path: Path) -> dict[str, ToolResultEvent]:
    events = await run_events(compile_project(project(tmp_path)), "a", "go")
    return {e.name: e for e in events if isinstance(e, ToolResultEvent)}


async def test_a_tool_raising_in_its_helper_points_at_the_helpers_line(tmp_path: Path) -> None:
    result = (await results(tmp_path))["lookup_order"]
    assert result.at == "hooks/mytools.py:7 in _pick"
    assert result.traceback == (
        "Traceback (most recent call last; the project's frames only):\n"
        "  [1 frame outside the project hidden]\n"
        '  File "hooks/mytools.py", line 14, in lookup_order\n'
        "    return _pick(orders, id)\n"
        '  File "hooks/mytools.py", line 7, in _pick\n'
        "    return orders[key]\n"
        "KeyError: 2"
    )


async def test_the_model_reads_the_one_line_error_only(tmp_path: Path) -> None:
    found = await results(tmp_path)
    assert found["lookup_order"].content == "Error: tool 'lookup_order' failed: KeyError: 2"
    for result in found.values():
        assert "hooks/" not in result.content and "Traceback" not in result.content


async def test_a_secret_in_the_message_or_the_source_line_is_masked(tmp_path: Path) -> None:
    result = (await results(tmp_path))["sign"]
    assert result.at == "hooks/mytools.py:20 in sign"
    assert result.traceback is not None and SECRET not in result.traceback
    assert 'raise ValueError(f"the service refused {token}")' in result.traceback
    assert result.traceback.endswith("ValueError: the service refused ***")
    assert SECRET not in result.content


async def test_library_frames_below_the_projects_are_hidden_too(tmp_path: Path) -> None:
    result = (await results(tmp_path))["parse"]  # an async tool: described on the loop
    assert result.at == "hooks/mytools.py:25 in parse"
    assert result.traceback is not None
    lines = result.traceback.splitlines()
    assert lines[-4:-1] == [
        '  File "hooks/mytools.py", line 25, in parse',
        "    return json.loads(text)",
        "  [3 frames outside the project hidden]",
    ]
    assert "json/decoder.py" not in result.traceback and "/fim/" not in result.traceback
    assert exception_attributes(result.traceback) == {
        "exception.type": "json.decoder.JSONDecodeError",
        "exception.message": "Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)",
        "exception.stacktrace": result.traceback,
    }


async def test_the_stored_run_keeps_where_a_tool_raised(tmp_path: Path) -> None:
    result = (await results(tmp_path))["lookup_order"]
    stored = json.loads(result.model_dump_json())
    assert stored["at"] == "hooks/mytools.py:7 in _pick"
    assert stored["traceback"].endswith("KeyError: 2")


async def test_fim_serve_logs_one_line_naming_the_tool_and_where(tmp_path: Path) -> None:
    result = (await results(tmp_path))["lookup_order"]
    assert raised_line(result) == (
        "tool 'lookup_order' raised KeyError: 2 at hooks/mytools.py:7 in _pick"
    )


async def test_the_tools_span_records_the_exception(tmp_path: Path, receiver: Receiver) -> None:
    await results(tmp_path)
    # deferred: the tracer is rebuilt around the test by the `receiver` fixture
    from fim.observe.tracing import flush

    assert flush()
    (span,) = [s for s in receiver.spans if s.name == "execute_tool lookup_order"]
    (exception,) = [attrs for name, attrs in span.events if name == "exception"]
    assert exception["exception.type"] == "KeyError"
    assert exception["exception.message"] == "2"
    assert 'File "hooks/mytools.py", line 7, in _pick' in exception["exception.stacktrace"]
    (sign,) = [s for s in receiver.spans if s.name == "execute_tool sign"]
    (signed,) = [attrs for name, attrs in sign.events if name == "exception"]
    assert SECRET not in json.dumps(signed)
