"""A small MCP server (the SDK's MCPServer, formerly FastMCP) that fim's tests talk to.

Run as `python tests/mcp_servers/demo.py [--http PORT] [--many N]`: stdio by default;
with `--http` one uvicorn process serves streamable HTTP at `/mcp` and legacy SSE at
`/sse`. Its tools exercise every path of fim's MCP client: plain text, numbers,
`isError` results, a call that hangs, a process that dies mid-call, image and
embedded-resource content, request headers, and a tool list that changes at runtime.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import sys
from collections.abc import Callable

if __name__ == "__main__":  # first: under a test process, a warm process runs this server
    with contextlib.suppress(ImportError):  # a copy of this script elsewhere runs as it is
        __import__("launch").relay(__file__)

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

PNG_1PX = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)


def build(many: int = 0) -> MCPServer:
    server = MCPServer("demo", instructions="Test server for fim", log_level="WARNING")

    @server.tool(
        description="Return the text unchanged",
        annotations=types.ToolAnnotations(read_only_hint=True),
    )
    def echo(text: str) -> str:
        return text

    @server.tool(description="Add two integers")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Always fails with the given message")
    def fail(message: str = "it broke") -> str:
        raise ToolError(message)

    @server.tool(description="Sleep for some seconds, then answer")
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool(
        description="Kill the server process without answering",
        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    def crash() -> str:
        sys.stderr.write("demo: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(17)

    @server.tool(description="The server's working directory")
    def cwd() -> str:
        return os.getcwd()

    @server.tool(description="An environment variable of the server process")
    def env(name: str) -> str:
        return os.environ.get(name, "(unset)")

    @server.tool(description="The server's process id")
    def pid() -> int:
        return os.getpid()

    @server.tool(description="Return a 1x1 PNG and a caption")
    def image() -> list[types.ContentBlock]:
        data = base64.b64encode(PNG_1PX).decode()
        return [
            types.TextContent(type="text", text="a pixel"),
            types.ImageContent(type="image", data=data, mime_type="image/png"),
        ]

    @server.tool(description="Return an embedded text resource and a binary one")
    def resource() -> list[types.ContentBlock]:
        return [
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(
                    uri="file:///notes.txt", mime_type="text/plain", text="remember the milk"
                ),
            ),
            types.EmbeddedResource(
                type="resource",
                resource=types.BlobResourceContents(
                    uri="file:///blob.bin",
                    mime_type="application/octet-stream",
                    blob=base64.b64encode(b"\x00\x01\x02").decode(),
                ),
            ),
        ]

    @server.tool(description="The value of an HTTP request header")
    def header(name: str, ctx: Context) -> str:
        return (ctx.headers or {}).get(name.lower(), "(absent)")

    @server.tool(description="Register a new tool and notify the client")
    async def grow(name: str, ctx: Context) -> str:
        def extra(text: str) -> str:
            return f"{name}: {text}"

        server.add_tool(extra, name=name, description=f"Added at runtime as {name}")
        await ctx.session.send_tool_list_changed()
        return f"added {name}"

    @server.tool(description="Say `times` times that the tool list changed (it did not)")
    async def churn(times: int, ctx: Context) -> str:
        for _ in range(times):
            await ctx.session.send_tool_list_changed()
        return f"said so {times} times"

    @server.tool(description="Report progress `steps` times, `delay` seconds apart")
    async def progress(steps: int, delay: float, ctx: Context) -> str:
        for i in range(steps):
            await asyncio.sleep(delay)
            await ctx.report_progress(i + 1, steps, f"step {i + 1}")
        return f"done after {steps} steps"

    class Person(BaseModel):
        name: str
        age: int = 0

    @server.tool(description="Ask the user for a name (MCP elicitation), then greet them")
    async def ask_name(ctx: Context, question: str = "Who are you?") -> str:
        answer = await ctx.elicit(question, Person)
        if answer.action == "accept":
            return f"hello {answer.data.name} ({answer.data.age})"
        return f"no name: {answer.action}"

    @server.tool(description="Ask the user two questions at once")
    async def ask_twice(ctx: Context) -> str:
        first, second = await asyncio.gather(
            ctx.elicit("First?", Person), ctx.elicit("Second?", Person)
        )
        return " / ".join(sorted([first.action, second.action]))

    @server.tool(description="Ask with a hostile form: a nested object schema")
    async def ask_nested(ctx: Context) -> str:
        result = await ctx.session.elicit_form(
            "nested?",
            {"type": "object", "properties": {"x": {"type": "object", "properties": {}}}},
        )
        return f"answer: {result.action}"

    @server.tool(description="Ask the user to open a URL")
    async def ask_url(ctx: Context) -> str:
        result = await ctx.elicit_url("log in here", "https://evil.example/login", "e1")
        return f"answer: {result.action}"

    @server.tool(description="The roots the client declared")
    async def roots(ctx: Context) -> str:
        listing = await ctx.session.list_roots()
        return " ".join(f"{r.name}={r.uri}" for r in listing.roots)

    @server.resource(
        "demo://notes", name="notes", description="Shopping notes", mime_type="text/plain"
    )
    def notes() -> str:
        return "remember the milk"

    @server.resource("demo://pixel", name="pixel", mime_type="image/png")
    def pixel() -> bytes:
        return PNG_1PX

    @server.resource("demo://greeting/{name}", name="greeting", description="A greeting")
    def greeting(name: str) -> str:
        return f"hello {name}"

    @server.prompt(description="Ask for a code review")
    def review(code: str, language: str = "python") -> str:
        return f"Please review this {language} code:\n{code}"

    @server.tool(description="Ask the client's model a question (MCP sampling)")
    async def ask_model(question: str, ctx: Context) -> str:
        result = await ctx.session.create_message(
            [
                types.SamplingMessage(
                    role="user", content=types.TextContent(type="text", text=question)
                )
            ],
            max_tokens=100_000,
            system_prompt="Answer briefly.",
        )
        return f"{result.model} said: {result.content.text}"

    for i in range(many):
        server.add_tool(_numbered(i), name=f"tool_{i:03d}", description=f"Numbered tool {i}")
    return server


def _numbered(i: int) -> Callable[[int], str]:
    def numbered(x: int = 0) -> str:
        return f"tool {i} got {x}"

    return numbered


def serve_http(server: MCPServer, port: int, json_response: bool = False) -> None:
    import uvicorn

    app = server.streamable_http_app(json_response=json_response)
    app.router.routes.extend(server.sse_app().routes)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=0, help="serve HTTP on this port")
    parser.add_argument("--many", type=int, default=0, help="add this many numbered tools")
    parser.add_argument("--tag", default="", help="ignored; lets a test find this process")
    parser.add_argument("--json", action="store_true", help="answer in JSON, not SSE")
    parser.add_argument(
        "--linger", type=float, default=0, help="stay alive this long after stdin closes"
    )
    opts = parser.parse_args()
    server = build(opts.many)
    if opts.http:
        serve_http(server, opts.http, opts.json)
    else:
        try:
            server.run("stdio")
        finally:
            if opts.linger:  # like servers that ignore EOF: only a signal stops them
                import time

                time.sleep(opts.linger)


if __name__ == "__main__":
    main()
