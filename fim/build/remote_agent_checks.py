"""`fim validate`'s checks of remote A2A agents (fim.yaml `a2a_agents:`) and of the names
an agent's `delegates:` lists.

A delegate is a local agent or a remote one: an unknown name gets a did-you-mean over both,
and a URL written in `delegates:` is told to be declared under `a2a_agents:` first. A remote
agent's `url` must be an absolute http(s) URL (the rule of a connector's `base_url`,
`fim.config.schema.connector.base_url_problem`) and each of its `headers:` one a request can
carry (`fim.config.header_text`), said at its line with the variables it reads, never the
value. One an unset `${VAR}` makes unavailable is reported for that already (a warning)."""

from __future__ import annotations

from typing import Any

from fim.build.connector_checks import check_mcp_headers
from fim.config.declarations import Entry
from fim.config.header_text import mapping_problems
from fim.config.interpolate import REFERENCE
from fim.config.schema.connector import base_url_problem
from fim.config.suggestions import suggest

_URL_HINT = "write its A2A endpoint or its agent-card URL, starting with http:// or https://"


def check_remote_endpoints(checker: Any) -> None:
    """fim.yaml's remote endpoints: MCP servers' headers (`check_mcp_headers`), remote A2A
    agents' URLs and headers, and a remote agent named like a local one."""
    check_mcp_headers(checker)
    decls = checker.decls
    doc = decls.project_doc
    for name, decl in decls.project.a2a_agents.items():
        if name in decls.entries["agent"]:
            where = decls.entries["agent"][name].doc.path
            message = f"remote A2A agent '{name}' has the name of the agent of {where}"
            hint = "rename one: a delegate's name must say which agent it is"
            checker.add(doc.problem(("a2a_agents", name), message, hint, key=True))
        if name in decls.unavailable["a2a"]:
            continue
        why = base_url_problem(decl.url)
        if why is not None:
            written = doc.written(("a2a_agents", name, "url")) or ""
            shown = written if REFERENCE.search(written) else decl.url
            message = f"url {shown!r} of remote A2A agent '{name}' is not an http(s) URL (it {why})"
            checker.add(doc.problem(("a2a_agents", name, "url"), message, _URL_HINT))
        for header, why in mapping_problems(decl.headers):
            where = ("a2a_agents", name, "headers", header)
            read = [m.group(2).split(":")[0] for m in REFERENCE.finditer(doc.written(where) or "")]
            source = f" (read from {', '.join(read)})" if read else ""
            message = (
                f"header {header!r}{source}: {why}; no call of remote A2A agent '{name}' "
                "could be sent"
            )
            named = why.startswith("its name")
            hint = "write the header as the remote agent's owner documents it, in ASCII"
            checker.add(doc.problem(where, message, hint, key=named))


def check_delegates(checker: Any, entry: Entry, delegates: list[str]) -> None:
    """Each name of an agent's `delegates:`: a local agent or a remote A2A agent."""
    decls = checker.decls
    agents = decls.entries["agent"]
    remote = set(decls.project.a2a_agents) if decls.project_ok else set()
    for i, name in enumerate(delegates):
        if name in agents or name in remote or name in decls.broken["agent"]:
            continue
        hint: str | None
        if name.lower().startswith(("http://", "https://")):
            hint = (
                "declare the remote agent in fim.yaml, `a2a_agents: {supplier: {url: "
                f"{name}}}}}`, then list its name: `delegates: [supplier]`"
            )
        else:
            hint = suggest(name, [*agents, *remote], "agents (remote ones: a2a_agents)")
        checker.add(entry.doc.problem(("delegates", i), f"unknown agent '{name}'", hint))


__all__ = ["check_delegates", "check_remote_endpoints"]
