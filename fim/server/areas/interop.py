"""MCP at `/mcp` and A2A cards and JSON-RPC at `/.well-known/agent-card.json` and
`/a2a/{agent}` (their SDKs load on the first request: see `fim.server.interop`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from fim.server.area import Area, Endpoint, Op, get, post
from fim.server.interop import CARD, interop_handlers


class JsonRpcRequest(BaseModel):
    """A JSON-RPC 2.0 request (MCP and A2A speak it; their SDKs validate the rest)."""

    jsonrpc: Literal["2.0"]
    method: str
    id: int | str | None = None
    params: dict[str, Any] | None = None


AREA = Area(
    "interop",
    (
        Endpoint(
            "/mcp",
            "mcp",
            {
                "POST": Op(
                    "MCP (streamable HTTP): the project's agents and workflows as MCP tools",
                    "interop",
                    body=JsonRpcRequest,
                    stream="MCP streamable HTTP responses (JSON or an event stream)",
                    errors=(400, 404, 406, 501),
                ),
                "GET": Op(
                    "MCP: the server-to-client event stream of a session",
                    "interop",
                    stream="MCP server messages",
                    errors=(400, 405, 406, 501),
                ),
                "DELETE": Op("MCP: end a session", "interop", errors=(400, 404, 405, 501)),
            },
            any_method=True,
        ),
        # A2A clients may add query parameters (the SDK's card resolver passes the caller's
        # `http_kwargs`): the SDK's app answers these, as MCP's answers `/mcp`
        get(
            CARD,
            "a2a",
            Op("A2A: the project's agent card (no key needed)", "interop", errors=(404, 501)),
            extra_query=True,
        ),
        get(
            "/a2a/{agent}" + CARD,
            "a2a",
            Op("A2A: one agent's card (no key needed)", "interop", errors=(404, 501)),
            extra_query=True,
        ),
        post(
            "/a2a/{agent}",
            "a2a",
            Op(
                "A2A JSON-RPC: send a message, get or cancel a task",
                "interop",
                body=JsonRpcRequest,
                stream="with `message/stream`: A2A task events",
                errors=(404, 501),
            ),
            extra_query=True,
        ),
    ),
    interop_handlers,
)
