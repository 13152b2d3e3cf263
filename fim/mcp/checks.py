"""An MCP server's schemas are a third party's: a value is checked against them in a
killable worker (`fim.tools.isolate.schema_problems`), never on the event loop.

The SDK checks a tool's structured result against the tool's output schema itself, inline,
with jsonschema. A server (a remote one, or one `mcp-remote` relays) that declares a few
kilobytes of `$ref`'d `anyOf` and answers to match held fim's event loop 12 s at depth 12
(days at 20): every run of the server stopped. `check_results` puts fim's check in the
SDK's place; a call's arguments are checked the same way (`McpTool.untrusted_schema`, the
`mcp` meta-tool).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fim.mcp.errors import McpResultRejected, McpUnavailable
from fim.mcp.info import ToolInfo
from fim.tools import isolate


def check_results(session: Any, tools: Callable[[], list[ToolInfo]], server: str) -> None:
    """Make `session` (the SDK's `ClientSession`) check structured results in a worker,
    against the output schemas of `tools()`, the live tool list of `server`."""

    async def validate_tool_result(name: str, result: Any) -> None:
        info = next((t for t in tools() if t.name == name), None)
        schema = info.output_schema if info is not None else None
        if schema is None:
            return
        content = result.structured_content
        if content is None and "structured_content" not in result.model_fields_set:
            raise McpResultRejected(
                "the tool has an output schema but its answer has no structured content"
            )
        found = await isolate.schema_problems(
            content, schema, whose=f"the output schema of '{name}'", party=server
        )
        if found:
            raise McpResultRejected(f"its structured content does not match: {found[0]}")

    if not callable(getattr(session, "validate_tool_result", None)):
        # the SDK checks results some other way now, maybe on the event loop: fail closed
        raise McpUnavailable(
            "this version of the MCP SDK checks tool results where fim cannot move the "
            "check off the event loop; install the version fim's pyproject names"
        )
    session.validate_tool_result = validate_tool_result
