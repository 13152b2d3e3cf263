"""`fim validate`'s check of an HTTP connector's `base_url`: it must be an absolute http(s)
URL (`fim.config.schema.connector.base_url_problem`, the rule the call applies too).

`base_url: ${PETSTORE_URL:-}` with the variable unset renders "", which validated, and then
every call failed after its retries with "the service may be down". An empty value, or one
without a scheme (`${API_URL:-}/v1` gives `/v1`), is a problem at the value, naming the
variables that left it so and offering a default that is a URL.

A variable's value from the environment is shown as `***` (it may hold credentials,
`https://user:token@host`); the text the file writes, defaults included, is in git and
shown as it is.
"""

from __future__ import annotations

import os
import re
from typing import Any

from fim.config.declarations import Entry
from fim.config.interpolate import REFERENCE, while_developing
from fim.config.schema import HttpConnector
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
