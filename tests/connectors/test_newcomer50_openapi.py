"""Newcomer 50, finding 4: Open-Meteo's real forecast spec (a committed fixture, with its
licence) imports to a connector that is available without a key and sends what the spec
asks. Its server is named on the path item, its `apikey` query parameter is optional (for
commercial subscriptions only), and its list parameters are `explode: false`, so
`hourly=temperature_2m,rain` is one parameter, not `hourly=temperature_2m&hourly=rain`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import ValidationError
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.commands.connector import register
from fim.config.schema import HttpAction, HttpConnector
from fim.connectors.http import HttpConnectorClient
from fim.connectors.http_request import build_request
from fim.connectors.openapi import import_openapi
from tests.http_stubs import Quiet, answer, serving

SPEC = Path(__file__).parents[1] / "fixtures" / "openapi" / "open-meteo" / "forecast.yml"


def run(*args: str | Path) -> Any:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """fim"""

    register(app)
    return CliRunner().invoke(app, ["connector", "import", *map(str, args)])


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("OPEN_METEO_API_KEY", raising=False)
    monkeypatch.delenv("OPEN_METEO_URL", raising=False)
    (tmp_path / "fim.yaml").write_text("name: weather\n")
    return tmp_path


class Echo(Quiet):
    """Answers every GET with the request line's target, exactly as it arrived."""

    seen: list[str] = []
    headers_seen: list[set[str]] = []

    def do_GET(self) -> None:
        Echo.seen.append(self.path)
        Echo.headers_seen.append({name.lower() for name in self.headers})
        answer(self, json.dumps({"path": self.path}).encode())


@pytest.fixture
def echo() -> Iterator[str]:
    Echo.seen, Echo.headers_seen = [], []
    with serving(Echo) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}"


def spec(**paths: Any) -> dict[str, Any]:
    return {"openapi": "3.1.0", "info": {"title": "T", "version": "1"}, "paths": paths}


def get(*params: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "get": {"parameters": list(params), "responses": {"200": {"description": "ok"}}},
        **more,
    }


# ----------------------------------------------------------------- the real spec


def test_open_meteo_imports_to_an_available_connector_at_its_path_servers_address(
    project: Path,
) -> None:
    result = run(SPEC, "--name", "open_meteo", "--project", project)
    assert result.exit_code == 0, result.output
    target = project / "connectors" / "open_meteo.yaml"
    assert f"wrote {target}: 1 action (1 read)" in result.output
    # no variable must be exported first: no `needs OPEN_METEO_URL` / `_API_KEY` line
    assert not [line for line in result.output.splitlines() if line.startswith("needs ")]
    assert (
        "warning: the query parameter apikey is optional in the spec: auth is written with "
        "${OPEN_METEO_API_KEY:-}, so the connector works without OPEN_METEO_API_KEY and sends "
        "the credential only when OPEN_METEO_API_KEY is set"
    ) in result.output
    decl = compile_project(project).connectors["open_meteo"]
    assert isinstance(decl, HttpConnector)
    assert decl.base_url == "https://api.open-meteo.com"  # the path item's servers[0]
    assert decl.auth is not None and decl.auth.type == "api_key" and decl.auth.key == ""
    action = decl.actions["get_v1_forecast"]
    assert "apikey" not in action.parameters["properties"]  # the key is no model argument
    assert action.query_style == {
        "hourly": "comma",
        "daily": "comma",
        "current": "comma",
        "minutely_15": "comma",
        "models": "comma",
    }


async def test_a_call_sends_lists_comma_separated_and_the_key_only_when_set(
    project: Path, echo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(SPEC, "--name", "open_meteo", "--project", project).exit_code == 0
    target = project / "connectors" / "open_meteo.yaml"
    text = target.read_text().replace("base_url: https://api.open-meteo.com", f"base_url: {echo}")
    target.write_text(text)
    args = {"latitude": "52.52", "longitude": "13.41", "hourly": ["temperature_2m", "rain"]}

    async def sent() -> str:
        decl = compile_project(project).connectors["open_meteo"]
        assert isinstance(decl, HttpConnector)
        client = HttpConnectorClient("open_meteo", decl)
        try:
            result = await client.call("get_v1_forecast", args)
        finally:
            await client.aclose()
        assert not result.is_error, result.content
        return Echo.seen[-1]

    # httpx writes the separating comma as %2C, which servers decode before splitting
    assert (
        await sent() == "/v1/forecast?latitude=52.52&longitude=13.41&hourly=temperature_2m%2Crain"
    )
    monkeypatch.setenv("OPEN_METEO_API_KEY", "om-key-1")
    assert await sent() == (
        "/v1/forecast?latitude=52.52&longitude=13.41&hourly=temperature_2m%2Crain&apikey=om-key-1"
    )


# ----------------------------------------------------------------- servers


def test_servers_on_path_items_that_agree_are_the_base_url() -> None:
    servers = [{"url": "https://api.example.com/{v}", "variables": {"v": {"default": "v2"}}}]
    doc = spec(**{"/a": get(servers=servers), "/b": get(servers=servers)})
    assert import_openapi(doc, "ex")["base_url"] == "https://api.example.com/v2"


def test_an_operations_own_servers_win_over_its_path_items() -> None:
    doc = spec(**{"/a": {**get(), "servers": [{"url": "https://path.example.com"}]}})
    doc["paths"]["/a"]["get"]["servers"] = [{"url": "https://op.example.com"}]
    assert import_openapi(doc, "ex")["base_url"] == "https://op.example.com"


def test_operations_sent_to_different_servers_are_named_in_a_warning() -> None:
    doc = spec(
        **{
            "/a": get(servers=[{"url": "https://one.example.com"}]),
            "/b": get(servers=[{"url": "https://two.example.com"}]),
        }
    )
    warnings: list[str] = []
    assert import_openapi(doc, "ex", warnings)["base_url"] == "${EX_URL}"
    assert (
        "the operations are sent to different servers (https://one.example.com for GET /a; "
        "https://two.example.com for GET /b): per-operation and per-path servers are not "
        "supported, so base_url is ${EX_URL}; import each server's operations as a connector "
        "of its own, or fix base_url by hand"
    ) in warnings


# ----------------------------------------------------------------- the api key


def key(required: bool | None) -> dict[str, Any]:
    param = {"name": "api_key", "in": "query", "schema": {"type": "string"}}
    return param if required is None else {**param, "required": required}


@pytest.mark.parametrize("required", [False, None])
def test_an_optional_key_parameter_gets_an_empty_default(required: bool | None) -> None:
    decl = import_openapi(spec(**{"/a": get(key(required))}), "ex")
    assert decl["auth"]["key"] == "${EX_API_KEY:-}"


def test_a_key_parameter_one_operation_requires_stays_required() -> None:
    decl = import_openapi(spec(**{"/a": get(key(False)), "/b": get(key(True))}), "ex")
    assert decl["auth"]["key"] == "${EX_API_KEY}"
    assert all("api_key" not in a["parameters"]["properties"] for a in decl["actions"].values())


@pytest.mark.parametrize("location", ["query", "header"])
async def test_an_empty_api_key_is_never_sent(echo: str, location: str) -> None:
    decl = HttpConnector.model_validate(
        {
            "kind": "http",
            "base_url": echo,
            "auth": {"type": "api_key", "key": "", "name": "apikey", "location": location},
            "actions": {"get": {"path": "/v1/forecast"}},
        }
    )
    client = HttpConnectorClient("om", decl)
    try:
        result = await client.call("get", {"latitude": "1"})
    finally:
        await client.aclose()
    assert not result.is_error, result.content
    assert Echo.seen == ["/v1/forecast?latitude=1"]
    assert "apikey" not in Echo.headers_seen[0]


# ----------------------------------------------------------------- query styles


@pytest.mark.parametrize(
    ("style", "value"),
    [("comma", "a,b"), ("space", "a b"), ("pipe", "a|b"), (None, ["a", "b"])],
)
def test_a_list_in_the_query_is_written_as_its_style_says(style: str | None, value: Any) -> None:
    action = HttpAction.model_validate(
        {
            "path": "/x",
            "parameters": {"type": "object", "properties": {"q": {"type": "array"}}},
            "query_style": {"q": style} if style else {},
        }
    )
    assert build_request(action, {"q": ["a", "b"]})["params"] == {"q": value}


def test_the_import_writes_each_non_exploded_style_and_warns_about_objects() -> None:
    def array(name: str, **style: Any) -> dict[str, Any]:
        return {"name": name, "in": "query", "schema": {"type": "array"}, **style}

    deep = {"name": "filter", "in": "query", "style": "deepObject", "schema": {"type": "object"}}
    doc = spec(
        **{
            "/a": get(
                array("plain"),
                array("exploded", style="form", explode=True),
                array("c", explode=False),
                array("s", style="spaceDelimited", explode=False),
                array("p", style="pipeDelimited"),
                deep,
            )
        }
    )
    warnings: list[str] = []
    action = import_openapi(doc, "ex", warnings)["actions"]["get_a"]
    assert action["query_style"] == {"c": "comma", "s": "space", "p": "pipe"}
    assert (
        "query parameters of a style fim does not send: GET /a filter (deepObject); fim sends "
        "an object as JSON text (a list as the spec asks): check what the API accepts"
    ) in warnings


def test_query_style_must_name_a_parameter_of_the_action() -> None:
    with pytest.raises(ValidationError, match=r"query_style names 'hourlyy', which is not a "):
        HttpAction.model_validate(
            {
                "path": "/x",
                "parameters": {"type": "object", "properties": {"hourly": {"type": "array"}}},
                "query_style": {"hourlyy": "comma"},
            }
        )
