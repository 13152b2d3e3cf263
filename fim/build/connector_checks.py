"""`fim validate`'s check of an HTTP connector's `base_url`: it must be an absolute http(s)
URL (`fim.config.schema.connector.base_url_problem`, the rule the call applies too).

`base_url: ${PETSTORE_URL:-}` with the variable unset renders "", which validated, and then
every call failed after its retries with "the service may be down". An empty value, or one
without a scheme (`${API_URL:-}/v1` gives `/v1`), is a problem at the value, naming the
variables that left it so and offering a default that is a URL.

Declared headers no request can carry (`fim.config.header_text`) are problems too: a
connector's and an MCP server's over HTTP (`check_mcp_headers`), named with the variables
they read, never with the value.

A variable's value from the environment is shown as `***` (it may hold credentials,
`https://user:token@host`); the text the file writes, defaults included, is in git and
shown as it is.
"""

from __future__ import annotations

import os
import re
from typing import Any

from fim.build.parameter_checks import check_actions
from fim.config.declarations import Entry
from fim.config.header_text import header_problems, mapping_problems
from fim.config.interpolate import REFERENCE, while_developing
from fim.config.schema import HttpConnector, HttpServer
from fim.config.schema.connector import base_url_problem

_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _variables(written: str) -> list[str]:
    """The variables `written` reads (`${NAME}`, `${NAME:-x}`; not the literal `$${...}`)."""
    found = []
    for match in REFERENCE.finditer(written):
        name = _VARIABLE.match(match.group(2))
        if not match.group(1) and name is not None:
            found.append(name.group(0))
    return list(dict.fromkeys(found))


def check_connector(checker: Any, entry: Entry) -> None:
    """Report an HTTP connector whose `base_url` no request can be sent to."""
    decl = entry.decl
    if not isinstance(decl, HttpConnector):
        return
    _check_headers(checker, entry, decl)
    check_actions(checker, entry, decl)  # `parameters` and `path` (newcomer-53 #3)
    why = base_url_problem(decl.base_url)
    if why is None:
        return
    written = entry.doc.written(("base_url",)) or ""
    names = _variables(written)
    empty = [name for name in names if not os.environ.get(name)]
    from_environment = len(empty) < len(names)  # shown masked, and where it came from
    shown = f"'***' (the value of {written})" if from_environment else repr(decl.base_url)
    message = (
        f"base_url {shown} is not an http(s) URL (it {why}): every call of this connector "
        "would fail before it is sent"
    )
    if empty:
        said = f"{', '.join(empty)} {'is' if len(empty) == 1 else 'are'} empty here"
        hint = (
            f"{said}: export {empty[0]}=https://..., or give a default: "
            f"{while_developing(empty[0], url=True)}"
        )
    else:
        hint = "write the API's address, starting with http:// or https://"
    checker.add(entry.doc.problem(("base_url",), message, hint))


def _check_headers(checker: Any, entry: Entry, decl: HttpConnector) -> None:
    """Report each declared header no request can carry (`fim.config.header_text`): named
    with the variables its value reads, never the value or the character that is wrong
    (attack-60 F2: a key holding `ä` validated, then every call failed naming it)."""
    for where, name, why in header_problems(decl):
        names = _variables(entry.doc.written(where) or "")
        source = f" (read from {', '.join(names)})" if names else ""
        message = (
            f"header {name!r}{source}: {why}; every call of this connector would fail "
            "before it is sent"
        )
        named = why.startswith("its name")  # said at the name: the key, or auth's `name:`
        at, key = (("auth", "name"), False) if named and where[0] == "auth" else (where, named)
        checker.add(entry.doc.problem(at, message, _header_hint(named, names), key=key))


def check_mcp_headers(checker: Any) -> None:
    """fim.yaml's MCP servers over HTTP: each `headers:` entry no request can carry, said
    as a connector's is (the header and the variables it reads, never the value); a server
    left out for an unset variable is reported for that already."""
    decls = checker.decls
    for server, decl in decls.project.mcp_servers.items():
        if not isinstance(decl, HttpServer) or server in decls.unavailable["mcp"]:
            continue
        for name, why in mapping_problems(decl.headers):
            where = ("mcp_servers", server, "headers", name)
            names = _variables(decls.project_doc.written(where) or "")
            source = f" (read from {', '.join(names)})" if names else ""
            message = (
                f"header {name!r}{source}: {why}; fim would never connect to MCP server "
                f"'{server}' (nothing is sent)"
            )
            named = why.startswith("its name")
            hint = _header_hint(named, names, "the server")
            checker.add(decls.project_doc.problem(where, message, hint, key=named))


def _header_hint(named: bool, names: list[str], whose: str = "the API") -> str:
    if named:
        return f"write the header's name as {whose} documents it"
    if names:
        return (
            f"check the value of {names[0]}: a character pasted by mistake, a key read "
            "from a file with its line break, or a value the service wants encoded"
        )
    return f"write the value as {whose} documents it, in ASCII"
