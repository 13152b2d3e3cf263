"""Attack 65 (functional): the URL an HTTP connector call goes to keeps every part its
declaration wrote.

- A query written in an action's `path:` (`/geocode?format=json`) is sent with the call's
  own query arguments: httpx's `params` replace a URL's query, so it was lost.
- A query in `base_url` (`.../maps/api/?key=...`) is sent with every call, and the
  action's path still goes below the base: the path was joined after the query and lost.
- A call argument may not replace a parameter the path fixes.
- `tool_result.http` shows the URL that was sent (each query value `***`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fim.config.schema import HttpConnector
from fim.connectors.http import HttpConnectorClient
from tests.http_stubs import Quiet, answer, serving

SEEN: list[str] = []


class Recorder(Quiet):
    def do_GET(self) -> None:
        SEEN.append(self.path)
        answer(self, b"{}")

    do_POST = do_GET


@pytest.fixture
def api() -> Iterator[str]:
    SEEN.clear()
    with serving(Recorder) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}"


PARAMS = {"type": "object", "properties": {"q": {"type": "string"}}}


async def call(base_url: str, path: str, args: dict[str, Any], method: str = "GET") -> Any:
    action = {"method": method, "path": path, "parameters": PARAMS, "query": ["q"]}
    decl = HttpConnector.model_validate(
        {"kind": "http", "base_url": base_url, "actions": {"geo": action}}
    )
    client = HttpConnectorClient("maps", decl)
    try:
        return await client.call("geo", args)
    finally:
        await client.aclose()


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_query_written_in_the_path_is_sent_with_the_arguments(
    api: str, method: str
) -> None:
    result = await call(f"{api}/v1/", "/geocode?format=json&lang=fr", {"q": "paris"}, method)
    assert not result.is_error, result.content
    assert SEEN == ["/v1/geocode?format=json&lang=fr&q=paris"]
    assert result.metadata["http"]["url"].endswith("/v1/geocode?format=***&lang=***&q=***")


async def test_a_query_written_in_the_path_is_sent_without_arguments(api: str) -> None:
    assert not (await call(api, "/geocode?format=json", {})).is_error
    assert SEEN == ["/geocode?format=json"]


@pytest.mark.parametrize("base", ["/maps/api/?key=k-1&x=a%20b", "/maps/api?key=k-1&x=a%20b"])
async def test_a_query_in_base_url_keeps_the_action_path(api: str, base: str) -> None:
    result = await call(api + base, "geocode/json", {"q": "x"})
    assert not result.is_error, result.content
    assert SEEN == ["/maps/api/geocode/json?key=k-1&x=a%20b&q=x"]


async def test_both_queries_and_the_arguments_are_sent_in_that_order(api: str) -> None:
    assert not (await call(f"{api}/api/?key=k-1", "/geo?format=json", {"q": "x"})).is_error
    assert SEEN == ["/api/geo?key=k-1&format=json&q=x"]


async def test_an_argument_may_not_replace_a_parameter_the_path_fixes(api: str) -> None:
    result = await call(api, "/geocode?q=fixed", {"q": "other"})
    assert (
        result.is_error
        and "'q'" in result.content
        and "fixed by the action's path" in (result.content)
    )
    assert SEEN == []
