"""`fim mcp list` and `fim mcp tools NAME`: see what the declared MCP servers offer.
`fim mcp serve`: the project itself as an MCP server on stdio (for Claude Code, Cursor).

`list` and `tools` start the servers (that is the point: a declaration can be valid and the
server still fail), then stop them before exiting. The SDK is imported only when needed.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fim.capabilities import CAPABILITIES
from fim.commands import ProjectOption, fail, load_snapshot, run_async, user_errors
from fim.stdout_guard import claim_stdout
from fim.terminal import printable

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot
    from fim.mcp.manager import ServerStatus


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Inspect the MCP servers declared in fim.yaml.", no_args_is_help=True)
    group.command("list")(list_servers)
    group.command("tools")(list_tools)
    group.command("serve")(serve)
    app.add_typer(group, name="mcp")


async def server_statuses(snapshot: Snapshot, names: list[str] | None = None) -> list[ServerStatus]:
    """Start the declared servers (or just `names`) and report each one's status."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.mcp.manager import McpManager

    manager = McpManager(snapshot.root)
    try:
        for name, decl in snapshot.project.mcp_servers.items():
            if names is None or name in names:
                manager.connection(name, decl, snapshot.root, mask=snapshot.mask)
        await manager.start_all()
        return manager.status()
    finally:
        await manager.aclose()


async def server_tools(snapshot: Snapshot, name: str) -> tuple[str | None, list[dict[str, object]]]:
    """(error, tools) of one server; each tool as name, fim name (the one the model calls
    and hooks see), full name (`{server}__{tool}`, which hooks see too), description and
    parameters."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.mcp.manager import McpManager
    from fim.mcp.naming import full_name, tool_name

    manager = McpManager(snapshot.root)
    try:
        conn = manager.connection(
            name, snapshot.project.mcp_servers[name], snapshot.root, mask=snapshot.mask
        )
        await manager.start_all()
        if conn.state != "ready":
            return conn.error or conn.state, []
        return None, [
            {
                "name": t.name,
                "fim_name": tool_name(name, t.name),
                "full_name": full_name(name, t.name),
                "description": t.description,
                "parameters": t.input_schema,
            }
            for t in conn.tools
        ]
    finally:
        await manager.aclose()


def list_servers(
    ctx: typer.Context,
    project: ProjectOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Start every declared MCP server and show its status and tool count."""
    snapshot = load_snapshot(ctx, project)
    rows = run_async(server_statuses(snapshot))
    mask = snapshot.masker
    if as_json:
        typer.echo(json.dumps(mask.value([row.__dict__ for row in rows]), indent=2))
    elif not rows:
        typer.echo("no MCP servers declared (add them under mcp_servers: in fim.yaml)")
    else:
        width = max(len(r.name) for r in rows)
        for r in rows:
            row = f"{r.name:<{width}}  {r.transport:<15}  {r.state:<7}  {r.tools:>3} tools"
            typer.echo(printable(mask.text(f"{row}  {r.detail}")))  # the server's own words
    if any(r.state != "ready" for r in rows):
        raise typer.Exit(1)


def list_tools(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Server name from mcp_servers: in fim.yaml.")],
    project: ProjectOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON with parameter schemas.")
    ] = False,
) -> None:
    """Start one MCP server and list its tools, by the name the model calls.

    Through the `mcp` tool in progressive mode (the default), `{server}__{tool}` in legacy
    mode.

    Beside a name fim shortened (over 64 characters, or with characters providers refuse)
    it shows the server's whole name, which hook matchers may use as well."""
    snapshot = load_snapshot(ctx, project)
    if name not in snapshot.project.mcp_servers:
        declared = ", ".join(snapshot.project.mcp_servers) or "none"
        fail(f"no MCP server named '{name}'", hint=f"declared: {declared}")
    error, tools = run_async(server_tools(snapshot, name))
    if error is not None:
        fail(f"MCP server '{name}' is unavailable: {error}")
    tools = snapshot.masker.value(tools)
    if as_json:
        typer.echo(json.dumps(tools, indent=2))
        return
    modes = _modes_of(snapshot, name)
    if modes["progressive"]:
        typer.echo(_through_meta(name, modes["progressive"]))
    for t in tools:
        summary = str(t["description"]).splitlines()[0] if t["description"] else ""
        shown, full = str(t["fim_name"]), t.get("full_name")
        if full is not None and full != shown:
            shown += f"  (full name: {full})"
        if modes["progressive"] and not modes["legacy"]:  # no model calls `{server}__x`
            shown = str(t["name"])
        typer.echo(printable(f"{shown}  {summary}"))  # the server's own words


def _modes_of(snapshot: Snapshot, server: str) -> dict[str, list[str]]:
    """The agents using `server`, by how their model calls its tools (newcomer-54 #3):
    `progressive` through the `mcp` meta-tool, `legacy` by `{server}__{tool}`. A server
    no agent uses is listed as a `legacy` agent would call it (its names are hooks' too)."""
    # deferred: loading fim.run.services costs tens of ms
    from fim.run.services import resolve_mode

    modes: dict[str, list[str]] = {"progressive": [], "legacy": []}
    for agent in snapshot.agents.values():
        if server in agent.mcp:
            mode = resolve_mode("mcp", snapshot, agent)
            modes["legacy" if mode == "legacy" else "progressive"].append(agent.name)
    return modes


def _through_meta(server: str, agents: list[str]) -> str:
    """The line above the tools of a server whose agents call them through `mcp`."""
    example = json.dumps(
        {
            "name": "mcp",
            "arguments": {
                "subcommand": "call",
                "server": server,
                "tool": "<tool>",
                "parameters": {},
            },
        }
    )
    return (
        f"agent{'s' if len(agents) > 1 else ''} {', '.join(agents)} (progressive mode) "
        f"call{'' if len(agents) > 1 else 's'} these through the `mcp` tool: {example} "
        f"(with tool_modes: {{mcp: legacy}}, as {server}__<tool>)"
    )


def serve(
    ctx: typer.Context,
    project: ProjectOption = None,
    reload: Annotated[
        bool, typer.Option("--reload/--no-reload", help="Recompile and swap on file changes.")
    ] = True,
    agents: Annotated[
        list[str] | None,
        typer.Option(
            "--agent",
            metavar="NAME",
            help="Serve only this agent or workflow (repeat for more); default: all of them.",
        ),
    ] = None,
) -> None:
    """Serve the project's agents and workflows as MCP tools on stdin/stdout."""

    # stdout is the protocol channel: every log line goes to stderr, set before the project
    # is compiled (a hooks module's `basicConfig(stream=sys.stdout)` then adds no handler)
    log_to_stderr()
    # the SDK writes messages to fim's own stdout, given to it; any other write to
    # `sys.stdout`, from any thread, is the project's print (attack-56 F1)
    wire = _utf8(claim_stdout())
    snapshot = load_snapshot(ctx, project)  # config errors before the client connects
    expose = _exposed(snapshot, agents)
    with user_errors(), contextlib.suppress(KeyboardInterrupt):
        run_async(_serve_stdio(snapshot, reload, wire, expose))


def _exposed(snapshot: Snapshot, names: list[str] | None) -> frozenset[str] | None:
    """The agents and workflows `--agent` names, each checked now: a misspelt one would
    serve a client nothing it asked for, without a word."""
    if not names:
        return None
    # deferred: only a command given `--agent` needs it
    from fim.config.suggestions import suggest

    declared = [*snapshot.agents, *snapshot.workflows]
    for name in names:
        if name not in declared:
            close = suggest(name, declared)
            if not (close and close.startswith("did you mean")):
                close = f"agents and workflows: {', '.join(declared) or 'none'}"
            fail(f"--agent {name}: no agent or workflow of that name", hint=close)
    return frozenset(names)


def log_to_stderr() -> None:
    """`fim mcp serve`'s log: stderr (stdout is the protocol), one line a record (a hook's
    stderr or a server's error text holds newlines, and a model may choose them)."""
    # deferred: the log formats cost ms; only the server needs them
    from fim.observe.logs import TextFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)


def _utf8(out: Any) -> Any:
    """UTF-8 text over the binary stream under `out` (as the SDK writes its messages),
    or `out` itself when it has none (a test's text buffer)."""
    buffer = getattr(out, "buffer", None)
    return out if buffer is None else _Unowned(buffer, encoding="utf-8")


class _Unowned(io.TextIOWrapper):
    """A text layer that never closes the stream under it (fim's stdout, for good)."""

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.detach()


async def _serve_stdio(
    snapshot: Snapshot, reload: bool, wire: Any = None, expose: frozenset[str] | None = None
) -> None:
    # deferred: loading asyncio costs a few ms
    import asyncio

    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.build.reload import SnapshotHolder, watch
    from fim.run.services import Services
    from fim.server.api import Api
    from fim.server.mcp_surface import serve_stdio

    holder = SnapshotHolder(snapshot)
    services = Services(
        root=snapshot.root, state_url=snapshot.project.state, providers=CAPABILITIES
    )
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch(snapshot.root, holder, stop=stop)) if reload else None
    try:
        await serve_stdio(Api(holder, services), wire, expose)
    finally:
        stop.set()
        if watcher is not None:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        await services.aclose()
