"""The tool-list cache of stdio servers: a run whose server's tools are cached builds its
prompt from the cache and starts the server in the background; a changed server (its
script edited) misses the cache and is listed again. With a real stdio server: a copy of
the demo server whose script the test edits, next to a copy of `mcp_servers/launch.py` so
that, like the other test servers, it is forked from the test process's warm zygote
instead of importing the MCP SDK itself (~1 s of CPU for each of the three starts)."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

from fim.build.compile import compile_project
from fim.capabilities import CAPABILITIES
from fim.config.schema import StdioServer
from fim.mcp.cache import FOLDER, cache_key, load
from fim.mcp.manager import McpManager
from fim.mcp.provider import provide
from fim.run.services import RunContext, Services
from tests.mcp_servers.harness import DEMO


def write_project(root: Path) -> Path:
    shutil.copy(DEMO, root / "server.py")
    shutil.copy(DEMO.parent / "launch.py", root / "launch.py")  # the script's `import launch`
    servers = {"demo": {"command": sys.executable, "args": ["server.py"]}}
    (root / "fim.yaml").write_text(json.dumps({"name": "p", "mcp_servers": servers}))
    (root / "agents").mkdir()
    (root / "agents" / "a.yaml").write_text(
        "instructions: Help.\nmodel: openai/gpt-4o-mini\nmcp: [demo]\n"
    )
    return root


async def provision(root: Path):
    snapshot = compile_project(root)
    services = Services(providers=CAPABILITIES, root=root, state_url=f"sqlite:///{root}/s.db")
    ctx = RunContext(snapshot=snapshot, agent=snapshot.agents["a"], services=services)
    return services, await provide(ctx)


async def test_a_cached_list_serves_the_prompt_and_a_changed_server_is_listed_again(
    tmp_path: Path,
):
    root = write_project(tmp_path)
    decl = StdioServer(command=sys.executable, args=["server.py"])
    key = cache_key(decl, root)
    assert key is not None and load(root, key) is None

    # 1. no cache: the run waits for the server, which lists its tools; they are cached
    services, first = await provision(root)
    conn = first.tools[0].connections["demo"]
    assert conn.state == "ready" and not conn.from_cache
    await services.aclose()
    cached = load(root, key)
    assert cached is not None and "ask_name" in [t.name for t in cached["tools"]]
    assert cached["server_name"] == "demo" and cached["has_prompts"]
    assert [p.name for p in (root / FOLDER).iterdir()] == [f"{key}.json"]

    # 2. cached: the prompt comes from the cache, the server starts in the background
    services, second = await provision(root)
    conn = second.tools[0].connections["demo"]
    assert conn.from_cache and conn.state in ("stopped", "starting")
    assert first.prompt == second.prompt and first.hidden == second.hidden
    result = await second.tools[0].run(
        subcommand="call", server="demo", tool="echo", parameters={"text": "hi"}
    )
    assert result.content == "hi" and conn.state == "ready" and not conn.from_cache
    await services.aclose()

    # 3. the server changes (a new tool): another key, so the run lists it again
    script = root / "server.py"
    script.write_text(
        script.read_text().replace(
            "    return server\n",
            textwrap.indent(
                textwrap.dedent(
                    """
                    @server.tool(description="Added by an upgrade")
                    def brand_new() -> str:
                        return "new"

                    return server
                    """
                ),
                "    ",
            ),
            1,
        )
    )
    changed = cache_key(decl, root)
    assert changed != key and load(root, changed) is None
    services, third = await provision(root)
    conn = third.tools[0].connections["demo"]
    assert conn.state == "ready" and "brand_new" in [t.name for t in conn.tools]
    assert "brand_new" in [t.name for t in load(root, changed)["tools"]]
    await services.aclose()


async def test_a_damaged_or_hostile_cache_entry_is_ignored(tmp_path: Path):
    root = write_project(tmp_path)
    decl = StdioServer(command=sys.executable, args=["server.py"])
    key = cache_key(decl, root)
    assert key is not None
    folder = root / FOLDER
    folder.mkdir(parents=True)
    for body in ("not json", json.dumps({"tools": [{"no": "name"}]}), json.dumps([1])):
        (folder / f"{key}.json").write_text(body)
        assert load(root, key) is None
    manager = McpManager(root)
    conn = manager.connection("demo", decl, root)
    assert not conn.prime_from_cache()
    # only stdio servers are cached: an HTTP server's tools change without a local sign
    from fim.config.schema import HttpServer

    assert cache_key(HttpServer(url="http://127.0.0.1:9/mcp"), root) is None
