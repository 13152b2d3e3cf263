"""A connector's credential is the operator's, whatever the model passes.

An action's parameters schema is open, and a GET sends every argument the model adds as a
query parameter. The connector added its `api_key` in the query only when the URL did not
carry one yet, so `{"api_key": "<the attacker's>"}` made the call as the attacker's account
(what the agent then reads is the attacker's; what a GET records lands there). Now an
argument spelled like one of the connector's credentials (its api key, `Authorization`,
bearer's `access_token`, a secret `headers:` entry; any case, `-` or `_`) is refused with a
tool error naming it and nothing is sent, declared parameter or not; and the connector's
query key replaces any parameter spelled like it on a request to its own origin.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from fim.config.schema import HttpConnector
from fim.connectors.http import get_client
from fim.connectors.http_tool import action_tool
from fim.connectors.openapi import import_openapi
from fim.run.services import Services
from fim.testing.connectors import serve
from fim.tools.registry import ToolRegistry
from fim.types import ToolResult

KEY = "operator-key-5f1c9a"
TOKEN = "operator-token-2b7d4e"
OPEN = {"type": "object", "properties": {"q": {"type": "string"}}, "additionalProperties": True}
"""Any argument may be sent (`fim.connectors.http_arguments`): these calls are judged by
their names alone."""


@pytest.fixture
def api() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A loopback API recording each request (its query as pairs, the credential headers,
    the body) and answering `{}`; `/bounce?to=...` redirects there (an open redirect)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, RedirectResponse, Response
    from starlette.routing import Route

    seen: list[dict[str, Any]] = []

    async def bounce(request: Request) -> Response:
        return RedirectResponse(request.query_params["to"], status_code=302)

    async def record(request: Request) -> Response:
        seen.append(
            {
                "path": request.url.path,
                "query": request.query_params.multi_items(),
                "headers": {
                    k: v for k, v in request.headers.items() if k.startswith(("x-", "auth"))
                },
                "body": (await request.body()).decode(),
            }
        )
        return JSONResponse({})

    app = Starlette(
        routes=[Route("/bounce", bounce), Route("/{p:path}", record, methods=["GET", "POST"])]
    )
    with serve(app) as url:
        yield url, seen


@pytest.fixture
async def services() -> AsyncIterator[Services]:
    svc = Services()
    yield svc
    await svc.aclose()


def connector(url: str, auth: dict[str, Any] | None, **action: Any) -> HttpConnector:
    fields = {"auth": auth} if auth else {}
    spec = {"path": "/items", "parameters": OPEN, **action}
    return HttpConnector.model_validate(
        {"kind": "http", "base_url": url, "actions": {"go": spec}, **fields}
    )


async def call(services: Services, decl: HttpConnector, args: dict[str, Any]) -> ToolResult:
    """The action called as the engine calls it: arguments checked against its schema."""
    registry = ToolRegistry(
        [action_tool(get_client(services, "shop", decl), a) for a in decl.actions]
    )
    return await registry.call(f"shop__{next(iter(decl.actions))}", args)


QUERY_KEY = {"type": "api_key", "key": KEY, "name": "api_key", "location": "query"}
HEADER_KEY = {"type": "api_key", "key": KEY, "name": "X-API-Key"}
BEARER = {"type": "bearer", "token": TOKEN}
BASIC = {"type": "basic", "username": "ann", "password": TOKEN}


def assert_refused(result: ToolResult, name: str, seen: list[dict[str, Any]]) -> None:
    assert result.is_error, result.content
    assert f"argument {name!r}" in result.content, result.content
    assert "the connector's own credential" in result.content
    assert KEY not in result.content and TOKEN not in result.content
    assert seen == [], "nothing is sent"


async def test_the_query_key_is_the_operators_and_an_argument_naming_it_is_refused(
    api: Any, services: Services
) -> None:
    url, seen = api
    decl = connector(url, QUERY_KEY)
    result = await call(services, decl, {"q": "x", "api_key": "attacker-key"})
    assert_refused(result, "api_key", seen)
    assert not (await call(services, decl, {"q": "x"})).is_error
    assert seen[0]["query"] == [("q", "x"), ("api_key", KEY)]


@pytest.mark.parametrize(
    "name", ["API_KEY", "Api-Key", "apiKey", "api_key ", "api.key", "api_key[]"]
)
async def test_a_look_alike_of_the_key_is_refused_too(
    api: Any, services: Services, name: str
) -> None:
    """A server may read any of these as `api_key` (case-insensitive frameworks, PHP
    turning `.` and spaces into `_`, `[]` into a list); which of two it takes is its own
    business, so none is sent beside the real key."""
    url, seen = api
    result = await call(services, connector(url, QUERY_KEY), {"q": "x", name: "attacker-key"})
    assert result.is_error, result.content
    assert f"{name!r} (as 'api_key')" in result.content
    assert seen == []


async def test_a_declared_parameter_named_like_the_key_is_refused(
    api: Any, services: Services
) -> None:
    url, seen = api
    declared = {"type": "object", "properties": {"api_key": {"type": "string"}}}
    result = await call(services, connector(url, QUERY_KEY, parameters=declared), {"api_key": "a"})
    assert_refused(result, "api_key", seen)


@pytest.mark.parametrize("action", [{}, {"body": "form"}, {"query": ["api_key"]}])
async def test_a_post_may_not_carry_the_query_key_in_its_query_or_body(
    api: Any, services: Services, action: dict[str, Any]
) -> None:
    """Rails' `params` and PHP's `$_REQUEST` read body fields over query parameters."""
    url, seen = api
    decl = connector(url, QUERY_KEY, method="POST", **action)
    assert_refused(await call(services, decl, {"q": "x", "api_key": "a"}), "api_key", seen)


@pytest.mark.parametrize("name", ["X-API-Key", "x_api_key", "X-Api-Key"])
async def test_an_argument_named_like_the_header_key_is_refused(
    api: Any, services: Services, name: str
) -> None:
    """Many APIs read the key from a header or a query parameter of the same name."""
    url, seen = api
    decl = connector(url, HEADER_KEY)
    result = await call(services, decl, {"q": "x", name: "attacker-key"})
    assert result.is_error, result.content
    assert repr(name) in result.content and seen == []
    assert not (await call(services, decl, {"q": "x"})).is_error
    assert seen[0]["headers"]["x-api-key"] == KEY and seen[0]["query"] == [("q", "x")]


async def test_a_post_body_field_named_like_a_header_credential_is_sent(
    api: Any, services: Services
) -> None:
    """No server reads a JSON body field as a request header: only the names a server
    also reads from the query (`credential_names`) are refused in a body."""
    url, seen = api
    decl = connector(url, HEADER_KEY, method="POST")
    result = await call(services, decl, {"q": "x", "x_api_key": "not-a-header"})
    assert not result.is_error, result.content
    assert json.loads(seen[0]["body"]) == {"q": "x", "x_api_key": "not-a-header"}
    assert seen[0]["headers"]["x-api-key"] == KEY


@pytest.mark.parametrize(
    ("auth", "name"),
    [
        (BEARER, "Authorization"),
        (BEARER, "authorization"),
        (BEARER, "access_token"),
        (BEARER, "Access-Token"),
        (BASIC, "AUTHORIZATION"),
    ],
)
async def test_an_argument_named_like_the_authorization_is_refused(
    api: Any, services: Services, auth: dict[str, Any], name: str
) -> None:
    """Bearer and basic travel in `Authorization`; RFC 6750 lets a server take a bearer
    token from an `access_token` query parameter or form field as well."""
    url, seen = api
    result = await call(services, connector(url, auth), {"q": "x", name: "Bearer attacker"})
    assert result.is_error, result.content
    assert repr(name) in result.content and seen == []


async def test_a_bearer_token_in_a_form_body_is_refused(api: Any, services: Services) -> None:
    url, seen = api
    decl = connector(url, BEARER, method="POST", body="form")
    assert_refused(await call(services, decl, {"access_token": "a"}), "access_token", seen)


async def test_a_secret_header_of_the_connector_is_a_credential_and_a_plain_one_is_not(
    api: Any, services: Services
) -> None:
    """GitLab reads `PRIVATE-TOKEN` as a header and `private_token` as a parameter."""
    url, seen = api
    decl = HttpConnector.model_validate(
        {
            "kind": "http",
            "base_url": url,
            "headers": {"PRIVATE-TOKEN": TOKEN, "Accept": "application/json"},
            "actions": {"go": {"path": "/items", "parameters": OPEN}},
        }
    )
    result = await call(services, decl, {"private_token": "attacker"})
    assert result.is_error and "'private_token' (as 'PRIVATE-TOKEN')" in result.content
    assert seen == []
    assert not (await call(services, decl, {"accept": "text"})).is_error
    assert seen[0]["query"] == [("accept", "text")]


async def test_a_redirect_back_to_the_own_origin_gets_the_operators_key(
    api: Any, services: Services
) -> None:
    """An open redirect of the API (steered by the model's `to`) back to the connector's
    own origin, naming another key: the connector's replaces it and its look-alikes."""
    url, seen = api
    decl = connector(url, QUERY_KEY, path="/bounce")
    to = "/items?q=x&api_key=attacker&API-KEY=attacker2"
    result = await call(services, decl, {"to": to})
    assert not result.is_error, result.content
    assert seen[0]["path"] == "/items"
    assert seen[0]["query"] == [("q", "x"), ("api_key", KEY)]


def imported(url: str, location: str, name: str) -> HttpConnector:
    """An imported spec whose scheme is an api key, which the operation also declares as
    a parameter (as specs without `securitySchemes` do, and some with)."""
    spec = {
        "openapi": "3.0.3",
        "info": {"title": "Shop", "version": "1"},
        "components": {
            "securitySchemes": {"key": {"type": "apiKey", "in": location, "name": name}}
        },
        "security": [{"key": []}],
        "paths": {
            "/items": {
                "get": {
                    "operationId": "listItems",
                    "parameters": [
                        {"name": "q", "in": "query", "schema": {"type": "string"}},
                        {"name": name, "in": location, "schema": {"type": "string"}},
                    ],
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
    }
    decl = import_openapi(spec, "shop")
    decl["base_url"], decl["auth"]["key"] = url, KEY
    return HttpConnector.model_validate(decl)


@pytest.mark.parametrize(("location", "name"), [("query", "api_key"), ("header", "X-API-Key")])
async def test_an_openapi_parameter_named_like_the_key_is_never_the_models(
    api: Any, services: Services, location: str, name: str
) -> None:
    url, seen = api
    decl = imported(url, location, name)
    result = await call(services, decl, {"q": "x", name: "attacker-key"})
    assert_refused(result, name, seen)
    assert not (await call(services, decl, {"q": "x"})).is_error
    sent = dict(seen[0]["query"]) if location == "query" else seen[0]["headers"]
    assert sent[name.lower() if location == "header" else name] == KEY


@pytest.mark.parametrize(
    "name", ["api_key[0]", "api_key[x]", "api_key[x][y]", "auth[api_key]", "api_key.0", "a.api_key"]
)
async def test_a_bracketed_or_dotted_form_of_the_key_is_refused(
    api: Any, services: Services, name: str
) -> None:
    """PHP, Rack and qs file `api_key[0]=A&api_key=B` under `api_key` (qs as the list
    `["A", "B"]`, PHP's last wins), qs with `allowDots` reads `api_key.0` as `api_key[0]`,
    and a nested `auth[api_key]` is the key to a framework reading the inner name: none is
    sent beside the real key."""
    url, seen = api
    result = await call(services, connector(url, QUERY_KEY), {"q": "x", name: "attacker-key"})
    assert result.is_error, result.content
    assert f"{name!r} (as 'api_key')" in result.content
    assert seen == []


@pytest.mark.parametrize(
    ("name", "credential", "auth"),
    [
        ("ap\u0131_key", "api_key", QUERY_KEY),  # dotless i: "ap\u0131_key".upper() == "API_KEY"
        ("api_\u212aey", "api_key", QUERY_KEY),  # Kelvin sign: NFKC makes it K
        ("\uff41\uff50\uff49\uff3f\uff4b\uff45\uff59", "api_key", QUERY_KEY),  # fullwidth
        ("acce\u017fs_token", "access_token", BEARER),  # long s: casefold makes it s
        ("\u0430pi_key", "api_key", QUERY_KEY),  # Cyrillic a: no table, fails closed
        ("\u0430\u0440\u0456_\u043a\u0435\u0443", "api_key", QUERY_KEY),  # all Cyrillic
        ("\u00e1pi_key", "api_key", QUERY_KEY),  # accented a
    ],
)
async def test_a_look_alike_letter_of_the_key_is_refused(
    api: Any, services: Services, name: str, credential: str, auth: dict[str, Any]
) -> None:
    """A letter outside ASCII is folded to the ASCII one a server's case folding reads
    it as, and a letter that folds to none is taken for any ASCII letter: a name that
    could be the credential's spelling is refused rather than sent beside it."""
    url, seen = api
    result = await call(services, connector(url, auth), {"q": "x", name: "attacker"})
    assert result.is_error, result.content
    assert f"{name!r} (as {credential!r})" in result.content
    assert seen == []


@pytest.mark.parametrize(
    "name", ["page[0]", "filter[name]", "api", "key", "sort.key", "\u540d\u524d", "\u00e1pi"]
)
async def test_a_bracketed_or_non_ascii_name_of_no_credential_is_sent(
    api: Any, services: Services, name: str
) -> None:
    url, seen = api
    result = await call(services, connector(url, QUERY_KEY), {name: "v"})
    assert not result.is_error, result.content
    assert seen[0]["query"] == [(name, "v"), ("api_key", KEY)]


async def test_a_redirect_naming_an_indexed_key_gets_the_operators_key(
    api: Any, services: Services
) -> None:
    """A redirect back to the own origin with `api_key[0]=<another>`: the connector's key
    replaces it, as it replaces `api_key` (qs would read both as one list)."""
    url, seen = api
    to = "/items?q=x&api_key[0]=attacker&ap%C4%B1_key=attacker2"
    result = await call(services, connector(url, QUERY_KEY, path="/bounce"), {"to": to})
    assert not result.is_error, result.content
    assert seen[0]["query"] == [("q", "x"), ("api_key", KEY)]
