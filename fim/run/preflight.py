"""Preflight: what a run can be known to need before its first step, checked up front.

A workflow that issues a refund and then fails on a missing API key at its summary node has
done harm a check could have prevented: nothing in a key, a missing MCP command or an unset
variable changes while a run is in flight. `workflow_problems` lists, for every `llm` node
and every agent an `agent` node runs, a model whose key is missing, and for every MCP server
a node or such an agent uses, a stdio command that is not installed. Every node is checked,
taken branch or not: a key missing anywhere is a misconfiguration to fix before anything
runs. A connector, MCP server or remote A2A agent whose `${VAR}` (without default) is unset
is left out of the snapshot as unavailable: a run that uses one is refused here, naming the
variable. `agent_problems` does the same for one agent run, so `fim run` and `fim eval
--live` fail in milliseconds instead of after starting MCP servers.

These are checks over the snapshot and the environment: no request, no subprocess, no
import of a model library. The one exception, `unreachable_problem`, opens a TCP connection
to a model endpoint on loopback; `fim run` calls it before its event loop starts.
"""

from __future__ import annotations

import difflib
import os
import shutil
import socket
from urllib.parse import urlsplit

from fim.build.snapshot import Snapshot
from fim.config.schema import AgentDecl, ModelSettings, WorkflowDecl
from fim.errors import RunError
from fim.hosts import is_loopback
from fim.run.remote_agents import remote_problems


class PreflightError(RunError):
    """A run refused before it started: the project lacks something (a key, an MCP
    command) that no request can supply. Over HTTP it is a 503, not the client's 400."""


def key_problem(settings: ModelSettings) -> RunError | None:
    """The error the first request of this model would raise for a missing API key (none
    while models are wrapped: a replayed cassette needs no key)."""
    # deferred: loading fim.types costs tens of ms
    from fim.llm import backend_for, models_wrapped

    return None if models_wrapped() else backend_for(settings).key_problem(settings)


def local_endpoint(settings: ModelSettings) -> str | None:
    """The URL of a model served on this machine (an `api_base` or OPENAI_BASE_URL on
    loopback, or a local provider's default such as Ollama's :11434), else None."""
    # deferred: loading fim.types costs tens of ms
    from fim.llm import backend_for

    url = backend_for(settings).endpoint(settings)
    return url if url and is_loopback(url) else None


def unreachable_problem(settings: ModelSettings) -> RunError | None:
    """A local model endpoint that refuses connections: nothing listens there, so a run
    would start MCP servers and select tools only to fail on its first model call. A TCP
    connect to loopback answers in a millisecond; only refused counts (a slow or busy
    server is the run's to find out). Blocking: call it before an event loop starts."""

    # deferred: loading fim.types costs tens of ms
    from fim.llm.base import cannot_connect

    url = local_endpoint(settings)
    if url is None:
        return None
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "localhost", port), timeout=0.5):
            return None
    except ConnectionRefusedError:
        return cannot_connect(settings, url)
    except OSError:
        return None


def command_problem(snapshot: Snapshot, server: str) -> str | None:
    """A stdio MCP server whose command is not on PATH (or not an executable file)."""
    decl = snapshot.project.mcp_servers.get(server)
    command = getattr(decl, "command", None)
    if not command:
        return None
    if os.sep in command:
        path = snapshot.root / (getattr(decl, "cwd", None) or "") / command
        found = path.is_file() and os.access(path, os.X_OK)
    else:
        found = shutil.which(command) is not None
    if found:
        return None
    return f"MCP server '{server}': command '{command}' not found"


LAUNCHERS = ("python", "python3", "node", "npx", "uv", "uvx", "docker", "deno", "bunx", "pipx")
"""The commands stdio MCP servers are usually started with: a close misspelling of one that
is installed here (`pythn`) is named in the hint."""


def command_hint(snapshot: Snapshot, server: str) -> str:
    """The fix for a `command_problem` (`fim run` and `fim validate` say the same)."""
    command = str(getattr(snapshot.project.mcp_servers.get(server), "command", None) or "")
    fix = "install it, or fix mcp_servers in fim.yaml"
    if not command or os.sep in command:
        return fix
    installed = [name for name in LAUNCHERS if shutil.which(name) is not None]
    close = difflib.get_close_matches(command, installed, n=1, cutoff=0.7)
    return f"did you mean '{close[0]}'? or {fix}" if close else fix


def _unavailable(snapshot: Snapshot, kind: str, name: str) -> RunError | None:
    """`Snapshot.unavailable`, tolerating a snapshot built before it existed (tests' fakes)."""
    check = getattr(snapshot, "unavailable", None)
    return check(kind, name) if check is not None else None


def agent_problems(
    snapshot: Snapshot, agent: AgentDecl, where: str = "", model: str | None = None
) -> list[RunError]:
    """Why a run of `agent` (on `model`, a role or litellm string, if given) is certain to
    fail before it starts: its model's key is missing, or an MCP server's command is."""
    prefix = where or f"agent '{agent.name}'"
    problems = []
    if (error := key_problem(snapshot.model_settings(model or agent.model))) is not None:
        problems.append(RunError(f"{prefix}: {error.message}", hint=error.hint))
    for kind, names in (("connector", agent.connectors), ("mcp", agent.mcp)):
        for name in names:  # an unset ${VAR} in its declaration (`Snapshot.unavailable`)
            if (error := _unavailable(snapshot, kind, name)) is not None:
                problems.append(RunError(f"{prefix}: {error.message}", hint=error.hint))
    for server in agent.mcp:
        if (problem := command_problem(snapshot, server)) is not None:
            problems.append(RunError(f"{prefix}: {problem}", hint=command_hint(snapshot, server)))
    for error in remote_problems(snapshot, agent):  # its remote A2A delegates
        problems.append(RunError(f"{prefix}: {error.message}", hint=error.hint))
    return problems


def workflow_problems(snapshot: Snapshot, decl: WorkflowDecl) -> list[RunError]:
    """Every certain failure of a run of `decl` (see the module docstring), in node order."""
    problems: list[RunError] = []
    for name, node in decl.nodes.items():
        where = f"node '{name}'"
        uses = node.uses()
        for ref in uses.models:
            error = key_problem(snapshot.model_settings(ref))
            if error is not None:
                problems.append(RunError(f"{where}: {error.message}", hint=error.hint))
        for agent_name in uses.agents:
            if agent_name in snapshot.agents:
                agent = snapshot.agents[agent_name]
                problems += agent_problems(snapshot, agent, f"{where} (agent '{agent.name}')")
        used = [("connector", tool.split("__")[0]) for tool in uses.tools if "__" in tool]
        for kind, used_name in [*used, *(("mcp", server) for server, _ in uses.mcp)]:
            if (error := _unavailable(snapshot, kind, used_name)) is not None:
                problems.append(RunError(f"{where}: {error.message}", hint=error.hint))
        for server in dict.fromkeys(server for server, _ in uses.mcp):
            if problem := command_problem(snapshot, server):
                problems.append(
                    RunError(f"{where}: {problem}", hint=command_hint(snapshot, server))
                )
    return problems


def _one(problems: list[RunError], opening: str = "") -> PreflightError:
    hints = list(dict.fromkeys(p.hint for p in problems if p.hint))
    message = opening + "; ".join(p.message for p in problems)
    return PreflightError(message, hint="; ".join(hints) or None)


def check_workflow(snapshot: Snapshot, decl: WorkflowDecl, name: str) -> None:
    """Raise one RunError listing every certain failure of a workflow run, before any node
    (and so any side effect) runs."""
    if problems := workflow_problems(snapshot, decl):
        raise _one(problems, f"workflow '{name}' not started, nothing ran: ")


def check_agent(snapshot: Snapshot, agent: AgentDecl, model: str | None = None) -> None:
    """Raise a RunError when a run of `agent` is certain to fail (see `agent_problems`), or
    its model is on this machine and nothing listens there (`fim run`, before its loop)."""
    if problems := agent_problems(snapshot, agent, model=model):
        raise _one(problems)
    if error := unreachable_problem(snapshot.model_settings(model or agent.model)):
        raise error


__all__ = [
    "PreflightError",
    "agent_problems",
    "check_agent",
    "check_workflow",
    "command_hint",
    "command_problem",
    "key_problem",
    "local_endpoint",
    "unreachable_problem",
    "workflow_problems",
]
