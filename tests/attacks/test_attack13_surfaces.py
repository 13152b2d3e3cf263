"""Attack round 13: the A2A and MCP surfaces, MCP sampling, OpenAPI connectors and the
state store between keys, in the default configuration. Each test states the safe
behaviour; they are strict xfails until fim holds it (/work/notes/attack-13.md)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.llm.script import text, tool_call
from fim.llm.scripted import ScriptedModel
from fim.run.agent import run_agent
from fim.store import get_store
from fim.store.usage import run_totals
from fim.testing.model_server import OpenAIStubServer
from fim.testing.runs import run_events, services_for
from fim.testing.stub_wire import completion
from fim.types import Message, ModelResponse, ToolSpec
from tests.mcp_servers.harness import stdio_decl


def write(root: Path, files: dict[str, str]) -> None:
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(body)


class _Gated:
    """A model that tells `entered` it was called and waits for `go` before answering:
    its run has started (its MCP server is connected) but has not called a tool yet."""

    def __init__(self, inner: ScriptedModel, entered: asyncio.Event, go: asyncio.Event):
        self.inner, self.entered, self.go, self.name = inner, entered, go, inner.name

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> ModelResponse:
        self.entered.set()
        await self.go.wait()
        return await self.inner.complete(messages, tools, **options)

    def stream(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> Any:
        return self.inner.stream(messages, tools, **options)


def _fast_endpoint(request: dict[str, Any]) -> dict[str, Any]:
    """The `fast` model: every call bills 5,000 + 2,000 tokens."""
    return completion(
        "42", None, request["model"], {"prompt_tokens": 5000, "completion_tokens": 2000}
    )


def test_mcp_sampling_is_counted_in_the_run_whose_tool_call_asked_for_it(tmp_path: Path) -> None:
    """A server of `scope: project` (the default) is one connection for every run and key.
    Each run that used it set `conn.sampling_model` to its own metered `fast` model, so a
    sampling request made during run A's tool call was billed to whichever run connected
    last: here run B, which had already finished and written its usage row, so the 7,000
    tokens are in no row, no day, session or key budget (or, with B still going, in
    another tenant's). Sampling is the run's whose tool call is in flight, as elicitation
    decides it (`fim.mcp.elicitation._answer`), and declined when that is not one run."""
    with OpenAIStubServer(handler=_fast_endpoint) as stub:
        write(
            tmp_path,
            {
                "fim.yaml": 'name: s\nstate: "sqlite:///.fim/state.db"\n'
                f"models: {{general: scripted, fast: {{model: openai/fast, api_base: "
                f"'{stub.base_url}'}}}}\n"
                "budget: {max_tokens_per_day: 1000000}\n"
                "tool_selection: {enabled: false}\n"
                f"mcp_servers: {{demo: {json.dumps(stdio_decl())}}}\n",
                "agents/a.yaml": "description: d\nmodel: general\nmcp: [demo]\n"
                "tool_modes: {mcp: legacy}\n",
                "agents/b.yaml": "description: d\nmodel: general\nmcp: [demo]\n"
                "tool_modes: {mcp: legacy}\n",
            },
        )
        snapshot = compile_project(tmp_path)

        async def scenario() -> dict[str, Any]:
            services = services_for(snapshot)
            entered, go = asyncio.Event(), asyncio.Event()
            script = [tool_call("demo__ask_model", {"question": "q"}), text("done")]
            model_a = _Gated(ScriptedModel(script), entered, go)

            async def run(agent: str, model: Any, owner: str, run_id: str) -> list[Any]:
                return [
                    e
                    async for e in run_agent(
                        snapshot,
                        agent,
                        "go",
                        services=services,
                        model=model,
                        owner=owner,
                        run_id=run_id,
                    )
                ]

            try:
                first = asyncio.create_task(run("a", model_a, "tenant-a", "run-a"))
                await entered.wait()  # run A is connected to the server
                await run("b", ScriptedModel([text("hi")]), "tenant-b", "run-b")
                go.set()
                events = await first
                results = [e.content for e in events if e.type == "tool_result"]
                assert results == ["fast said: 42"]  # the sampling was served
                return await run_totals(get_store(services), ["run-a", "run-b"])
            finally:
                await services.aclose()

        totals = asyncio.run(scenario())
    # before the fix: run-a 5 prompt tokens (its scripted turns), run-b 1: the 5,000 in no row
    assert totals["run-a"].prompt_tokens >= 5000, totals


@pytest.mark.parametrize("mode", ["progressive", "legacy"])
def test_a_model_argument_never_replaces_the_connectors_query_credential(
    tmp_path: Path, mode: str
) -> None:
    """`auth: {type: api_key, location: query}` is added by `HttpFetcher._sign` only when
    the URL does not already carry that parameter, and a GET action sends every argument
    the model adds (the parameters schema is open) as a query parameter. So a model that
    passes `api_key: <its own>` makes the connector call the API as another account (the
    attacker's: its data is what the agent reads, what it deletes is the attacker's). The
    connector's own credential is what its own origin gets; a model argument of that name
    is refused (or dropped)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from fim.testing.connectors import serve

    seen: list[list[str]] = []

    async def record(request: Request) -> JSONResponse:
        seen.append(request.query_params.getlist("api_key"))
        return JSONResponse({"items": []})

    app = Starlette(routes=[Route("/{p:path}", record)])
    with serve(app) as url:
        write(
            tmp_path,
            {
                "fim.yaml": 'name: q\nstate: "sqlite:///.fim/state.db"\n'
                "models: {general: scripted}\n",
                "connectors/shop.yaml": f"kind: http\nbase_url: {url}\n"
                "auth: {type: api_key, key: operator-key, name: api_key, location: query}\n"
                "actions:\n  list_items:\n    method: GET\n    path: /items\n"
                "    parameters: {type: object, properties: {q: {type: string}}}\n",
                "agents/a.yaml": "description: d\nmodel: general\nconnectors: [shop]\n"
                + ("tool_modes: {connectors: legacy}\n" if mode == "legacy" else ""),
            },
        )
        snapshot = compile_project(tmp_path)
        args = {"q": "x", "api_key": "attacker-key"}
        call = (
            tool_call("shop__list_items", args)
            if mode == "legacy"  # the default, progressive: through the `connector` meta-tool
            else tool_call(
                "connector",
                {"subcommand": "execute", "connector": "shop", "action": "list_items",
                 "parameters": args},
            )
        )  # fmt: skip
        model = ScriptedModel([call, text("done")])

        events = asyncio.run(run_events(snapshot, "a", "go", model=model))
    # before the fix: [["attacker-key"]]; safe: the operator's key, or no request at all
    assert seen in ([["operator-key"]], []), seen
    results = [e.content for e in events if e.type == "tool_result"]
    assert any("the connector's own credential" in r for r in results), results
