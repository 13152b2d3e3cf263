"""MCP client features beyond tools, against the real demo server over stdio: resources,
prompts, media, roots, progress (which extends the deadline), per-tool timeouts, and the
Claude `.mcp.json` entry shape in fim.yaml."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from fim.config.schema import StdioServer
from fim.mcp.calls import call_tool
from fim.mcp.connection import ServerConnection
from fim.mcp.legacy import legacy_tools
from fim.mcp.manager import McpManager
from fim.mcp.meta import McpMetaTool, effective_tool_name
from tests.mcp_servers.demo import PNG_1PX
from tests.mcp_servers.harness import stdio_decl

pytestmark = pytest.mark.asyncio(loop_scope="module")
ROOT = Path(__file__).parents[1]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def demo():
    manager = McpManager(ROOT)
    decl = StdioServer(**stdio_decl(tool_timeouts={"slow": 0.5, "progress": 1.0}, timeout=10.0))
    conn = manager.connection("demo", decl, ROOT)
    await conn.start()
    yield conn
    await manager.aclose()


async def test_meta_tool_lists_and_reads_resources(demo: ServerConnection):
    meta = McpMetaTool({"demo": demo})
    listing = await meta.run(subcommand="resources", server="demo")
    assert not listing.is_error
    assert "demo://notes notes (text/plain): Shopping notes" in listing.content
    assert "demo://greeting/{name} greeting" in listing.content
    read = await meta.run(subcommand="read_resource", server="demo", uri="demo://notes")
    assert read.content == "remember the milk"
    templated = await meta.run(subcommand="read_resource", server="demo", uri="demo://greeting/ann")
    assert templated.content == "hello ann"
    missing = await meta.run(subcommand="read_resource", server="demo", uri="demo://nope")
    assert missing.is_error and "rejected by the server" in missing.content
    no_uri = await meta.run(subcommand="read_resource", server="demo")
    assert no_uri.is_error and "needs `uri`" in no_uri.content


async def test_image_resources_are_placeholders_with_the_data_in_metadata(demo: ServerConnection):
    meta = McpMetaTool({"demo": demo})
    read = await meta.run(subcommand="read_resource", server="demo", uri="demo://pixel")
    assert read.content == f"[resource: demo://pixel, image/png, {len(PNG_1PX)} bytes]"
    [media] = read.metadata["media"]
    assert media["type"] == "image" and media["mime_type"] == "image/png"
    assert base64.b64decode(media["data"]) == PNG_1PX
    tool = await call_tool(demo, "image", {})
    assert tool.content.startswith("a pixel\n[image: image/png")
    assert base64.b64decode(tool.metadata["media"][0]["data"]) == PNG_1PX


async def test_meta_tool_lists_and_gets_prompts(demo: ServerConnection):
    meta = McpMetaTool({"demo": demo})
    listing = await meta.run(subcommand="prompts", server="demo")
    assert "- review(code, language?): Ask for a code review" in listing.content
    got = await meta.run(
        subcommand="get_prompt", server="demo", prompt="review", parameters={"code": "x = 1"}
    )
    assert got.content == "(Ask for a code review)\nuser: Please review this python code:\nx = 1"
    bad = await meta.run(subcommand="get_prompt", server="demo", prompt="review")
    assert bad.is_error and "Missing required arguments" in bad.content


async def test_hook_view_shows_resource_reads_as_server_tools(demo: ServerConnection):
    meta = McpMetaTool({"demo": demo})
    args = {"subcommand": "read_resource", "server": "demo", "uri": "demo://notes"}
    view = meta._call_view(args)
    assert (view.name, view.args) == ("demo__read_resource", {"uri": "demo://notes"})
    assert view.to_call is not None
    assert view.to_call({"uri": "demo://other"})["uri"] == "demo://other"
    assert effective_tool_name("mcp", args) == "demo__read_resource"
    prompt = meta._call_view(
        {"subcommand": "get_prompt", "server": "demo", "prompt": "review", "parameters": {"a": "b"}}
    )
    assert (prompt.name, prompt.args) == (
        "demo__get_prompt",
        {"name": "review", "arguments": {"a": "b"}},
    )
    assert meta._call_view({"subcommand": "resources", "server": "demo"}).name == "mcp"


async def test_legacy_mode_offers_resource_and_prompt_tools(demo: ServerConnection):
    tools = {t.name: t for t in legacy_tools([demo])}
    for name in ("list_resources", "read_resource", "list_prompts", "get_prompt"):
        assert f"demo__{name}" in tools
    assert (await tools["demo__read_resource"].run(uri="demo://notes")).content == (
        "remember the milk"
    )
    got = await tools["demo__get_prompt"].run(name="review", arguments={"code": "y"})
    assert "review this python code:\ny" in got.content


async def test_roots_are_the_project_directory(demo: ServerConnection):
    result = await call_tool(demo, "roots", {})
    assert result.content == f"project={ROOT.resolve().as_uri()}"


async def test_progress_extends_the_deadline_and_is_kept(demo: ServerConnection):
    # 6 steps of 0.3s = 1.8s in all, past the 1s timeout, but never 1s without progress
    result = await call_tool(demo, "progress", {"steps": 6, "delay": 0.3})
    assert result.content == "done after 6 steps", result.content
    assert [p["message"] for p in result.metadata["progress"]] == [f"step {i}" for i in range(1, 7)]
    assert result.metadata["progress"][-1] == {"progress": 6, "total": 6, "message": "step 6"}


async def test_timeouts_are_per_tool(demo: ServerConnection):
    assert demo.timeout_for("slow") == 0.5 and demo.timeout_for("echo") == 10.0
    result = await call_tool(demo, "slow", {"seconds": 5})
    assert result.is_error and "did not answer within 0.5s" in result.content
    assert (await call_tool(demo, "echo", {"text": "ok"})).content == "ok"


async def test_sampling_is_served_by_the_model_of_the_run_that_called(demo: ServerConnection):
    from fim.llm.scripted import ScriptedModel, text
    from fim.mcp.caller import Caller

    model = ScriptedModel([text("forty-two")], name="fast-double")
    run = Caller(run_id="r1", agent="a", services=None, mask=str, sampling=lambda: model)
    result = await call_tool(demo, "ask_model", {"question": "meaning of life?"}, run)
    assert result.content == "fast-double said: forty-two", result.content
    [(messages, _tools)] = model.requests
    assert [(m.role, m.content) for m in messages] == [
        ("system", "Answer briefly."),
        ("user", "meaning of life?"),
    ]
    refused = await call_tool(demo, "ask_model", {"question": "again?"})  # outside any run
    assert refused.is_error and "no tool call of a run is in flight" in refused.content


async def test_a_server_is_served_at_most_twenty_samplings_a_minute():
    """Sampling spends the operator's tokens on the server's behalf: a server asking in a
    loop is refused past 20 a minute, and is served again once the minute slides."""
    from types import SimpleNamespace

    import mcp_types

    from fim.llm.scripted import ScriptedModel, text
    from fim.mcp.caller import Caller
    from fim.mcp.sampling import SAMPLING_PER_MINUTE, sampling_callback

    now = [0.0]
    model = ScriptedModel([text("ok")] * (SAMPLING_PER_MINUTE + 1), name="fast")
    run = Caller(run_id="r1", agent="a", services=None, mask=str, sampling=lambda: model)
    chatty: Any = SimpleNamespace(name="chatty", inflight=lambda: [SimpleNamespace(caller=run)])
    sample = sampling_callback(chatty, clock=lambda: now[0])
    params = mcp_types.CreateMessageRequestParams(
        messages=[
            mcp_types.SamplingMessage(
                role="user", content=mcp_types.TextContent(type="text", text="again")
            )
        ],
        max_tokens=10,
    )
    answers = [await sample(None, params) for _ in range(SAMPLING_PER_MINUTE + 1)]
    assert all(isinstance(a, mcp_types.CreateMessageResult) for a in answers[:-1])
    refused = answers[-1]
    assert isinstance(refused, mcp_types.ErrorData)
    assert refused.message == "more than 20 sampling requests in a minute; ask again in 60s"
    now[0] = 60.0
    assert isinstance(await sample(None, params), mcp_types.CreateMessageResult)
    assert len(model.requests) == SAMPLING_PER_MINUTE + 1
