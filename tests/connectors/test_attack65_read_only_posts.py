"""Attack 65 F1: an `access: read` POST stays the POST it was declared, whatever the model
adds to its arguments.

A `read_only` agent may call a POST that only reads (a search): `readonly_guard` and
`confirm` judge the access the author declared. Rails routes a POST whose form holds
`_method=delete` as a DELETE, Laravel reads `_method` from the body or the query, gateways
read an `X-HTTP-Method-Override` field; the schema did not forbid extra properties, so the
model turned a read into a delete while the audit trail said POST. Now:

- a method-override name (`_method` in any case, the `X-HTTP-Method-Override` family in any
  spelling) is refused in the query and in every body, declared or not, schema open or not;
- an action whose schema names properties sends only those: any other argument is refused,
  naming it and the declared ones (`additionalProperties` opens the schema again);
- a refused call sends nothing, and its `tool_result` carries no `http` facts: nothing went.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.config.schema import HttpConnector
from fim.connectors.http import HttpConnectorClient
from fim.events import HookEvent, ToolResultEvent
from fim.testing.runs import run_events
from tests.http_stubs import Quiet, answer, serving

SEEN: list[dict[str, Any]] = []


class Recorder(Quiet):
    """Records each request's method, path with query, content type and body."""

    def _record(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        SEEN.append(
            {
                "method": self.command,
                "path": self.path,
                "type": self.headers.get("Content-Type") or "",
                "body": self.rfile.read(size).decode() if size else "",
            }
        )
        answer(self, b'{"orders": []}')

    do_GET = do_POST = do_DELETE = _record


@pytest.fixture
def api() -> Iterator[str]:
    SEEN.clear()
    with serving(Recorder) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}"


Q = {"q": {"type": "string"}}


def shop(url: str, **action: Any) -> HttpConnector:
    spec = {"method": "POST", "access": "read", "path": "/orders/search", **action}
    spec.setdefault("parameters", {"type": "object", "properties": Q})
    return HttpConnector.model_validate({"kind": "http", "base_url": url, "actions": {"go": spec}})


async def call(decl: HttpConnector, args: dict[str, Any]) -> Any:
    client = HttpConnectorClient("shop", decl)
    try:
        return await client.call("go", args)
    finally:
        await client.aclose()


OPENED = {"type": "object", "properties": Q, "additionalProperties": True}
DECLARED = {"type": "object", "properties": {**Q, "_method": {"type": "string"}}}


@pytest.mark.parametrize("body", ["json", "form", "multipart"])
@pytest.mark.parametrize(
    "name",
    [
        "_method",
        "_METHOD",
        ".method",  # PHP reads a `.` in a name as `_`
        "_method[x]",  # PHP and Rack file it under `_method`
        "X-HTTP-Method-Override",
        "x_http_method_override",
        "X-HTTP-Method",
        "x-method-override",
    ],
)
@pytest.mark.parametrize("schema", [OPENED, DECLARED], ids=["open", "declared"])
async def test_a_method_override_in_any_body_is_refused_and_nothing_is_sent(
    api: str, body: str, name: str, schema: dict[str, Any]
) -> None:
    """Neither an open schema nor a declared `_method` lets one through."""
    result = await call(shop(api, body=body, parameters=schema), {"q": "7", name: "delete"})
    assert result.is_error, result.content
    assert repr(name) in result.content and "another method" in result.content
    assert SEEN == [] and "http" not in result.metadata


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_method_override_in_the_query_is_refused(api: str, method: str) -> None:
    """A GET's arguments and a POST's `query:` parameters go to the query string, where
    Laravel reads `_method` too."""
    decl = shop(api, method=method, query=["_method"], parameters=DECLARED)
    result = await call(decl, {"q": "7", "_method": "DELETE"})
    assert result.is_error and "'_method'" in result.content
    assert SEEN == []


async def test_a_parameter_named_method_is_an_ordinary_parameter(api: str) -> None:
    """JSON-RPC and payment APIs take a `method` field: only `_method` is an override."""
    parameters = {"type": "object", "properties": {"method": {"type": "string"}}}
    result = await call(shop(api, parameters=parameters), {"method": "eth_call"})
    assert not result.is_error, result.content
    assert json.loads(SEEN[0]["body"]) == {"method": "eth_call"}


async def test_an_undeclared_argument_is_refused_naming_the_declared_ones(api: str) -> None:
    """The schema the model was shown lists `q`; a GET would have put `action=delete` in
    its query string, and a POST in its body."""
    for method in ("GET", "POST"):
        result = await call(shop(api, method=method), {"q": "7", "action": "delete"})
        assert result.is_error, result.content
        assert "argument 'action' is not a parameter of this action" in result.content
        assert "(its parameters: q)" in result.content
    assert SEEN == []


async def test_declared_names_are_properties_path_and_query_parameters(api: str) -> None:
    """Every name the declaration gives is sent: a property of an `allOf` branch, a `{id}`
    of the path written without a property, a `query:` parameter."""
    parameters = {"type": "object", "allOf": [{"properties": Q}, {"properties": {"n": {}}}]}
    decl = shop(api, path="/orders/{id}/search", query=["page"], parameters=parameters)
    result = await call(decl, {"id": "7", "q": "x", "n": 1, "page": 2})
    assert not result.is_error, result.content
    assert SEEN[0]["path"] == "/orders/7/search?page=2"
    assert json.loads(SEEN[0]["body"]) == {"q": "x", "n": 1}


@pytest.mark.parametrize(
    "parameters",
    [
        OPENED,
        {"type": "object", "properties": Q, "additionalProperties": {"type": "string"}},
        {"type": "object"},
        {"type": "object", "properties": {}},  # what an action without `parameters:` has
    ],
    ids=["additional-true", "additional-schema", "no-properties", "empty-properties"],
)
async def test_a_schema_that_names_no_properties_or_opens_itself_sends_every_argument(
    api: str, parameters: dict[str, Any]
) -> None:
    result = await call(shop(api, parameters=parameters), {"q": "7", "extra": "x"})
    assert not result.is_error, result.content
    assert json.loads(SEEN[0]["body"]) == {"q": "7", "extra": "x"}


def project(root: Path, url: str, legacy: bool) -> Path:
    if legacy:
        calls = (
            "[{name: shop__search, arguments: {q: '7', _method: delete}}, "
            "{name: shop__find, arguments: {q: '7', _method: DELETE}}]"
        )
    else:
        execute = "{name: connector, arguments: {subcommand: execute, connector: shop, action: "
        calls = (
            f"[{execute}search, parameters: {{q: '7', _method: delete}}}}}}, "
            f"{execute}find, parameters: {{q: '7', _method: DELETE}}}}}}]"
        )
    modes = "tool_modes: {connectors: legacy}\n" if legacy else ""
    actions = {"search": "form", "find": "json"}
    files = {
        "fim.yaml": 'name: a65\nread_only: true\nstate: "sqlite:///.fim/state.db"\n',
        "connectors/shop.yaml": "kind: http\ndescription: shop\n"
        f"base_url: {url}\nactions:\n"
        + "".join(
            f"  {name}:\n    description: {name} orders\n    method: POST\n    access: read\n"
            f"    body: {body}\n    path: /orders/{name}\n"
            "    parameters: {type: object, properties: {q: {type: string}}}\n"
            for name, body in actions.items()
        ),
        "s.yaml": f"default:\n  - tool_calls: {calls}\n  - text: done\n",
        "agents/clerk.yaml": "description: c\nmodel: scripted:s.yaml\nread_only: true\n"
        f"connectors: [shop]\n{modes}",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize("legacy", [False, True], ids=["progressive", "legacy"])
async def test_a_read_only_agent_cannot_make_a_read_post_a_delete(
    tmp_path: Path, api: str, legacy: bool
) -> None:
    """`readonly_guard` allows the read; the override is refused before anything is sent."""
    events = await run_events(compile_project(project(tmp_path, api, legacy)), "clerk", "x")
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert len(results) == 2
    for result in results:
        assert result.is_error and "'_method'" in result.content, result.content
        assert result.http is None  # nothing was sent
    guard = [e for e in events if isinstance(e, HookEvent) and e.hook.startswith("readonly_guard")]
    assert guard and all(e.decision == "allow" for e in guard)  # the action is a read
    assert SEEN == []
