"""fim's MCP client against a server no one here wrote: `@modelcontextprotocol/server-everything`
from npm, installed into a temp dir. It needs the network, so it runs only with
FIM_TEST_MCP_EVERYTHING=1 (and is skipped, with the reason, when npm or the install fails),
or when `.ci/run` installed it into the npm cache folder (FIM_NPM_CACHE)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import pytest_asyncio

from fim.config.schema import StdioServer
from fim.llm.scripted import ScriptedModel, text
from fim.mcp.caller import Caller
from fim.mcp.calls import call_tool
from fim.mcp.connection import ServerConnection
from fim.mcp.manager import McpManager
from fim.mcp.meta import McpMetaTool

pytestmark = pytest.mark.asyncio(loop_scope="module")
PACKAGE = "@modelcontextprotocol/server-everything"


@pytest.fixture(scope="module")
def everything_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = Path(os.environ.get("FIM_NPM_CACHE", Path.home() / ".cache" / "fim-test-npm"))
    cached = cache / "node_modules" / ".bin" / "mcp-server-everything"
    if cached.exists():  # installed ahead by .ci/run: no network needed here
        return cached
    if os.environ.get("FIM_TEST_MCP_EVERYTHING") != "1":
        pytest.skip("needs the network (npm install); set FIM_TEST_MCP_EVERYTHING=1 to run")
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed")
    where = tmp_path_factory.mktemp("everything")
    try:
        done = subprocess.run(
            [
                npm,
                "install",
                "--no-audit",
                "--no-fund",
                "--silent",
                "--prefix",
                str(where),
                PACKAGE,
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"npm install {PACKAGE} timed out")
    binary = where / "node_modules" / ".bin" / "mcp-server-everything"
    if done.returncode != 0 or not binary.exists():
        pytest.skip(f"npm install {PACKAGE} failed: {done.stderr.strip()[-300:]}")
    return binary


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def everything(everything_bin: Path, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("project")
    manager = McpManager(root)
    conn = manager.connection("ev", StdioServer(command=str(everything_bin), args=["stdio"]), root)
    await conn.start()
    yield conn
    await manager.aclose()


async def test_resources_and_prompts(everything: ServerConnection):
    meta = McpMetaTool({"ev": everything})
    listing = await meta.run(subcommand="resources", server="ev")
    assert "demo://resource/static/document/architecture.md" in listing.content
    read = await meta.run(
        subcommand="read_resource",
        server="ev",
        uri="demo://resource/static/document/architecture.md",
    )
    assert not read.is_error and len(read.content) > 20
    prompts = await meta.run(subcommand="prompts", server="ev")
    assert "args-prompt(city, state?)" in prompts.content
    got = await meta.run(
        subcommand="get_prompt", server="ev", prompt="args-prompt", parameters={"city": "Oslo"}
    )
    assert "Oslo" in got.content


async def test_images_reach_the_metadata(everything: ServerConnection):
    result = await call_tool(everything, "get-tiny-image", {})
    assert "[image: image/png" in result.content
    assert result.metadata["media"][0]["mime_type"] == "image/png"


async def test_roots_and_sampling_are_served(everything: ServerConnection):
    roots = await call_tool(everything, "get-roots-list", {})
    assert everything.root.resolve().as_uri() in roots.content, roots.content
    model = ScriptedModel([text("hello from fast")], name="fast")
    run = Caller(run_id="r1", agent="a", services=None, mask=str, sampling=lambda: model)
    sampled = await call_tool(everything, "trigger-sampling-request", {"prompt": "hi"}, run)
    assert "hello from fast" in sampled.content, sampled.content
