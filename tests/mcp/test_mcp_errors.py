"""What a server's failure puts in an observation is bounded, whatever the server sends
(fim/mcp/errors.py): a malformed answer is described by its count of validation errors and
the first few, never by `str()` of them all (100,000 text blocks without their `text` made
a 232-million-character observation; 300,000 took the whole process down), and every
failure's text, a JSON-RPC error's message included, is cut to 2,000 characters,
masked before the cut."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from pydantic import ValidationError

from fim import masking
from fim.config.schema import StdioServer
from fim.mcp.cache import FOLDER, cache_key, store
from fim.mcp.calls import call_tool
from fim.mcp.connection import ServerConnection
from fim.mcp.errors import McpUnavailable, describe_exception
from fim.mcp.info import ToolInfo
from fim.mcp.manager import McpManager

ROOT = Path(__file__).parents[1]
HOSTILE = ROOT / "mcp_servers" / "hostile.py"


@pytest.fixture
async def manager():
    manager = McpManager(ROOT)
    yield manager
    await manager.aclose()


def hostile(manager: McpManager, mode: str, n: int) -> ServerConnection:
    decl = StdioServer(command=sys.executable, args=[str(HOSTILE), mode, str(n)])
    return manager.connection("hostile", decl, ROOT)


async def test_an_answer_with_many_malformed_blocks_is_told_by_their_count(manager):
    """Past 10,000 errors none is listed: listing the first builds them all."""
    conn = hostile(manager, "blocks", 2_000)  # 12 validation errors each
    result = await call_tool(conn, "bad", {})
    assert result.is_error
    assert result.content == (
        "Error: MCP tool 'bad' of server 'hostile' was rejected by the server: ValidationError: "
        "24,000 validation errors for CallToolResult. Check the name and arguments."
    )
    assert (await call_tool(conn, "echo", {"text": "ok"})).content == "ok"


async def test_a_few_validation_errors_are_listed_without_the_answer_they_quote(manager):
    result = await call_tool(hostile(manager, "blocks", 1), "bad", {})
    head = (
        "Error: MCP tool 'bad' of server 'hostile' was rejected by the server: ValidationError: "
        "12 validation errors for CallToolResult: content.0.TextContent.text: Field required; "
    )
    assert result.content.startswith(head)
    assert result.content.endswith(" (and 9 more). Check the name and arguments.")
    assert result.content.count("content.0.") == 3
    assert "input_value" not in result.content


async def test_a_long_error_message_is_cut(manager):
    """A server's JSON-RPC error of 5 MB went to the model whole."""
    result = await call_tool(hostile(manager, "error", 5_000_000), "bad", {})
    assert result.is_error
    assert result.content == (
        "Error: MCP tool 'bad' of server 'hostile' was rejected by the server: "
        + "E" * 2_000
        + "... (4,998,000 more characters). Check the name and arguments."
    )


async def test_a_tool_list_the_sdk_cannot_read_fails_the_start_in_one_line(manager):
    conn = hostile(manager, "tools", 20_000)  # none has the input schema it must have
    with pytest.raises(McpUnavailable) as failed:
        await conn.start()
    assert str(failed.value).startswith(
        "ValidationError: 20,000 validation errors for ListToolsResult [command: "
    )


def test_a_failure_is_masked_before_it_is_cut(monkeypatch):
    """A secret at the cut would be left in part, which no mask matches any more."""
    secret = "sk-live-0123456789abcdef"
    monkeypatch.setattr(masking, "_known", masking.Masker([secret]))
    text = "x" * 1_990 + secret + "y" * 100
    described = describe_exception(RuntimeError(text))
    assert secret[:4] not in described  # cut first, its first 10 characters were left
    shown = "x" * 1_990 + "***" + "y" * 7  # the count is of the text as given
    assert described == f"RuntimeError: {shown}... (114 more characters)"


def test_a_validation_error_quotes_no_input():
    with pytest.raises(ValidationError) as failed:
        mcp_types.TextContent.model_validate({"type": "text", "text": ["secret-ish input"]})
    described = describe_exception(failed.value)
    assert described == (
        "ValidationError: 1 validation error for TextContent: text: Input should be a valid string"
    )


async def test_what_a_server_writes_in_its_tool_list_reaches_the_model_masked(manager):
    """A server started with a secret in its `env:` can print it in its name, a tool's
    description, title or schema: every tool list of every model call carries those, so
    they are masked where they are read, as a tool result is (attack-19, gap left)."""
    secret = "sk-live-listing-0123456789abcdef"
    decl = StdioServer(
        command=sys.executable, args=[str(HOSTILE), "leaky", "0"], env={"LEAK": secret}
    )
    mask = masking.Masker([secret]).text
    conn = manager.connection("leaky", decl, ROOT, mask=mask)
    await conn.start()
    (info,) = conn.tools
    shown = repr((conn.server_name, info.description, info.title, info.input_schema))
    assert secret not in shown and shown.count("***") == 4
    assert info.input_schema["properties"]["text"]["description"] == "like ***"
    assert "text" in info.parameters["properties"]  # a property's name is left as it is


def leaky_names(secret: str) -> StdioServer:
    """The hostile server writing `secret` into a tool's name and a property's name."""
    return StdioServer(
        command=sys.executable, args=[str(HOSTILE), "leakynames", "0"], env={"LEAK": secret}
    )


async def test_a_tool_whose_name_or_property_name_holds_a_secret_is_not_offered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A name cannot be masked (a call is matched by it), and every tool list of every
    model call would carry it: such a tool is dropped with a warning, the others offered
    (attack-21 #4). The server's version is masked like its name."""
    secret = "sk-live-named-0123456789abcdef"
    decl = leaky_names(secret)
    manager = McpManager(tmp_path)
    try:
        conn = manager.connection("leaky", decl, tmp_path, mask=masking.Masker([secret]).text)
        await conn.start()
        assert [t.name for t in conn.tools] == ["echo"]
        assert conn.server_version == "1 ***"
    finally:
        await manager.aclose()

    dropped = [r.getMessage() for r in caplog.records if "is not offered" in r.getMessage()]
    assert dropped == [
        f"MCP server 'leaky': tool '{name}' is not offered: its name or a property name of "
        "its schema holds a secret (masked here), which would reach the model provider in "
        "every tool list"
        for name in ("get_***", "find")
    ]
    (entry,) = (tmp_path / FOLDER).glob("*.json")  # the tool-list cache's copy
    assert secret not in entry.read_text() and "echo" in entry.read_text()


async def test_a_cached_tool_whose_name_holds_a_secret_is_not_offered(tmp_path: Path) -> None:
    """An entry of the tool-list cache written by an older fim (or before the secret was
    one) holds such tools and the version as they were: the cache's copy is judged as a
    live listing is."""
    secret = "sk-live-cached-0123456789abcdef"
    decl = leaky_names(secret)
    key = cache_key(decl, tmp_path)
    assert key is not None
    schema: dict[str, Any] = {"type": "object", "properties": {secret: {}}}
    listing = {
        "tools": [
            ToolInfo(name="echo", description="echo", input_schema={"type": "object"}),
            ToolInfo(name=f"get_{secret}", description="get", input_schema={"type": "object"}),
            ToolInfo(name="find", description="find", input_schema=schema),
            ToolInfo(
                name="report",
                description="report",
                input_schema={"type": "object"},
                output_schema=schema,
            ),
        ],
        "server_name": "hostile",
        "server_version": f"1 {secret}",
        "has_resources": False,
        "has_prompts": False,
    }
    store(tmp_path, key, listing)
    manager = McpManager(tmp_path)
    try:
        conn = manager.connection("leaky", decl, tmp_path, mask=masking.Masker([secret]).text)
        assert conn.prime_from_cache()
        assert [t.name for t in conn.tools] == ["echo"]
        assert conn.server_version == "1 ***"
    finally:
        await manager.aclose()
