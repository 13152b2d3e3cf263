"""Attack round 12: the four guarantees against a hostile caller or model, in the default
configuration. Each test states the safe behaviour; they are strict xfails until fim holds
it (/work/notes/attack-12.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.hooks.command_process import HookOutputTooLarge, run_command
from fim.llm.script import text, tool_call
from fim.llm.scripted import ScriptedModel
from fim.run.overrides import RunOverrides
from fim.testing.connectors import serve
from fim.testing.model_server import OpenAIStubServer
from fim.testing.runs import run_events
from fim.testing.stub_wire import completion


def write(root: Path, files: dict[str, str]) -> None:
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(body)


def test_a_callers_max_tokens_never_raises_a_budgeted_calls_cap(tmp_path: Path) -> None:
    """Near a limit a call is sent with `max_tokens` cut to the room left, so the provider
    cannot bill past the budget. The OpenAI endpoint's `max_tokens` (and
    `max_completion_tokens`) from the caller are merged over it by `OverriddenModel`, inside
    `MeteredModel`: a tenant with a 3,000-token day asks for 200,000 and the model gets
    200,000. A caller's value may lower the cap, never raise it."""
    sent: list[tuple[Any, Any]] = []

    def handler(request: dict[str, Any]) -> dict[str, Any]:
        sent.append((request.get("max_tokens"), request.get("max_completion_tokens")))
        return completion(
            "ok", None, request["model"], {"prompt_tokens": 10, "completion_tokens": 5}
        )

    with OpenAIStubServer(handler=handler) as stub:
        write(
            tmp_path,
            {
                "fim.yaml": 'name: b\nstate: "sqlite:///.fim/state.db"\n'
                f"models: {{general: {{model: openai/gen, api_base: '{stub.base_url}'}}}}\n"
                "budget: {max_tokens_per_day: 3000}\n",
                "agents/a.yaml": "description: d\nmodel: general\n",
            },
        )
        snapshot = compile_project(tmp_path)
        for sampling in ({"max_tokens": 200_000}, {"max_completion_tokens": 200_000}):
            asyncio.run(run_events(snapshot, "a", "go", overrides=RunOverrides(sampling=sampling)))
    assert len(sent) == 2
    # today: [(200000, None), (2962, 200000)]
    for max_tokens, max_completion in sent:
        assert max_tokens is not None and max_tokens <= 3000
        assert max_completion is None or max_completion <= 3000


def test_a_read_only_agent_never_sends_a_delete_through_a_connector(tmp_path: Path) -> None:
    """`read_only: true` always adds `readonly_guard`, which blocks `access: write|admin`.
    An action's `access` defaults to `read` whatever its method, so a connector written by
    hand with `method: DELETE` and no `access:` is run for a read-only agent (and
    `fim validate` says nothing); `fim connector import` derives access from the method
    (DELETE is admin). The safe default: a method that changes state is not a read unless
    the author says `access: read`."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    seen: list[str] = []

    async def record(request: Request) -> JSONResponse:
        seen.append(request.method)
        return JSONResponse({"deleted": True})

    app = Starlette(routes=[Route("/{p:path}", record, methods=["GET", "DELETE"])])
    with serve(app) as url:
        write(
            tmp_path,
            {
                "fim.yaml": 'name: b\nstate: "sqlite:///.fim/state.db"\n'
                "models: {general: scripted}\n",
                "connectors/shop.yaml": f"kind: http\nbase_url: {url}\nactions:\n"
                "  delete_order:\n    method: DELETE\n    path: /orders/{id}\n"
                "    parameters: {type: object, properties: {id: {type: string}}}\n",
                "agents/a.yaml": "description: d\nmodel: general\nread_only: true\n"
                "connectors: [shop]\ntool_modes: {connectors: legacy}\n",
            },
        )
        snapshot = compile_project(tmp_path)
        model = ScriptedModel([tool_call("shop__delete_order", {"id": "42"}), text("done")])
        asyncio.run(run_events(snapshot, "a", "go", model=model))
    assert seen == []  # today: ["DELETE"]


def test_a_command_hooks_output_is_read_up_to_a_cap() -> None:
    """Sandboxed tools keep 10,000 characters of stdout and read and drop the rest; a
    command hook's output is read whole by `communicate()` until the hook exits or its
    timeout (30 s by default). A hook whose output the model sizes (a scanner that prints
    the file a Write names; the model names /dev/zero) takes the server's memory. The
    output fim keeps (the hook's JSON answer or reason) stays under a cap, 1 MiB: a hook
    that writes more is killed and fails closed (never decided on a cut answer)."""
    with pytest.raises(HookOutputTooLarge, match="more than 1 MiB to stdout"):
        asyncio.run(  # before the cap: returned all 20,000,000 bytes
            run_command(
                "head -c 20000000 /dev/zero", "", {"PATH": "/usr/bin:/bin"}, cwd=".", timeout=30
            )
        )


def _budgeted_project(root: Path, base_url: str, budget: str) -> Any:
    """A project whose `general` model is the stub at `base_url`, under `budget` (a line of
    fim.yaml, empty for none)."""
    write(
        root,
        {
            "fim.yaml": 'name: b\nstate: "sqlite:///.fim/state.db"\n'
            f"models: {{general: {{model: openai/gen, api_base: '{base_url}'}}}}\n{budget}",
            "agents/a.yaml": "description: d\nmodel: general\n",
        },
    )
    return compile_project(root)


def _caps_sent(root: Path, budget: str, asked: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    """The (`max_tokens`, `max_completion_tokens`) the endpoint got for one run per entry
    of `asked`, each the sampling overrides of an OpenAI-endpoint caller."""
    sent: list[tuple[Any, Any]] = []

    def handler(request: dict[str, Any]) -> dict[str, Any]:
        sent.append((request.get("max_tokens"), request.get("max_completion_tokens")))
        return completion(
            "ok", None, request["model"], {"prompt_tokens": 10, "completion_tokens": 5}
        )

    with OpenAIStubServer(handler=handler) as stub:
        snapshot = _budgeted_project(root, stub.base_url, budget)
        for sampling in asked:
            asyncio.run(run_events(snapshot, "a", "go", overrides=RunOverrides(sampling=sampling)))
    return sent


def test_a_callers_lower_max_tokens_lowers_a_budgeted_calls_cap_as_one_field(
    tmp_path: Path,
) -> None:
    """Under a budget a caller's cap may lower the room-capped `max_tokens`: the call is
    sent the smaller value, in one field (`max_tokens`), whichever spelling the caller used
    and even when it used both with different values."""
    asked = [
        {"max_tokens": 100},
        {"max_completion_tokens": 50},
        {"max_tokens": 70, "max_completion_tokens": 60},
    ]
    sent = _caps_sent(tmp_path, "budget: {max_tokens_per_day: 3000}\n", asked)
    assert sent == [(100, None), (50, None), (60, None)]


def test_a_callers_max_tokens_passes_as_it_is_with_no_budget(tmp_path: Path) -> None:
    """With no budget fim holds no room and sets no cap: the caller's value and spelling
    reach the endpoint as the caller sent them (`client_sampling`)."""
    asked = [{"max_tokens": 200_000}, {"max_completion_tokens": 200_000}]
    assert _caps_sent(tmp_path, "", asked) == [(200_000, None), (None, 200_000)]


def test_a_lower_cap_is_the_room_a_budgeted_call_holds() -> None:
    """The room a call holds in its limits' pools while in flight is the cap it is sent
    with: a caller's (or an MCP sampling request's) lower `max_tokens` holds that much, not
    the model's allowance, so calls in parallel are not refused or kept waiting for room
    they will never use. A cap the model's `extra:` sends in a provider's own spelling
    (`num_predict` here) is set to the same value: no field leaves above what is held."""
    from types import SimpleNamespace

    from fim.config.schema.spend import Budget
    from fim.run.spend import MeteredModel
    from fim.run.tokens import count_messages
    from fim.types import Message, ModelResponse

    seen: list[tuple[dict[str, Any], int]] = []

    class Endpoint:
        name = "gen"
        settings = SimpleNamespace(max_tokens=None, extra={"num_predict": -1})

        async def complete(self, messages: Any, tools: Any = None, **options: Any) -> Any:
            seen.append((options, metered.node.pool.held_tokens))
            return ModelResponse(message=Message(role="assistant", content="ok"))

    metered = MeteredModel(Endpoint(), [("agent 'a'", Budget(max_tokens=3000))], agent="a")
    messages = [Message(role="user", content="hi")]
    asyncio.run(metered.complete(messages, None, max_completion_tokens=100))
    estimate = count_messages(messages, None, "gen")
    assert seen == [({"max_tokens": 100, "num_predict": 100}, estimate + 100)]
