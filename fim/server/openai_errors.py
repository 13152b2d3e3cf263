"""Errors in OpenAI's shape: a failed run as an HTTP status and error object (the model's
failure is a 502, a budget a 402, fim's own a 500), and Starlette's own 404/405 as JSON.

Its own module because the native run routes (`fim.server.agent_routes`) answer a failed run
with the same object and the app installs `http_error` for every route: neither needs the
chat completions surface loaded for it.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from fim.events import RunFinished
from fim.server.http import JSONResponse, error
from fim.server.stopping import called_tools

RESPONSES_PATH = re.compile(r"^(/v1)?/responses(/|$)")
"""OpenAI's Responses API (`POST /v1/responses`, `/responses` for a base URL without `/v1`),
which fim does not serve."""
RESPONSES_HINT = (
    "fim speaks Chat Completions (POST /v1/chat/completions, model: an agent's name), not the "
    'Responses API: in openai-agents call set_default_openai_api("chat_completions") or use '
    "OpenAIChatCompletionsModel; with the openai client, client.chat.completions.create"
)
"""The 404 hint of the Responses API: openai-agents calls it unless told otherwise, and
its users would otherwise read only "unknown route"."""


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (unknown route 404, wrong method 405) as OpenAI-shaped JSON."""

    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 404:
        return error(
            404,
            f"unknown route {request.method} {request.url.path}",
            RESPONSES_HINT
            if RESPONSES_PATH.search(request.url.path)
            else "see GET /v1/models, /v1/agents, /v1/workflows",
        )
    detail = exc.detail if isinstance(exc, HTTPException) else "error"
    return error(status, f"{detail}: {request.method} {request.url.path}")


UPSTREAM_KINDS = frozenset({"model_error", "empty_reply", "invalid_output"})
"""Error kinds of a run that are the model's failure (HTTP 502), not fim's (HTTP 500): an
answer that failed its schema twice is the model's."""


def failure(trace: list[dict[str, Any]], final: RunFinished) -> tuple[str, str]:
    """(kind, message) of a failed run: its last error event, else its final output."""
    for event in reversed(trace):
        if event.get("type") == "error":
            return str(event.get("kind") or "run_error"), str(event.get("message") or "")
    return "run_error", final.output


def error_object(problem: tuple[str, str]) -> tuple[int, dict[str, Any]]:
    """HTTP status and OpenAI error object for a failed run: a model that failed upstream
    (unreachable, rejected the key, timed out) is 502 Bad Gateway, anything else 500."""
    kind, message = problem
    if kind == "budget_exceeded":  # 402, not 429: the OpenAI SDKs retry 429s, re-spending
        # the limit it passed
        field = re.search(r"\b(?:server\.key_)?budget\.max_[a-z_]+", message)
        return 402, {
            "error": {
                "message": message,
                "type": "insufficient_quota",
                "param": field.group(0) if field else None,
                "code": kind,
            }
        }
    upstream = kind in UPSTREAM_KINDS
    return (502 if upstream else 500), {
        "error": {
            "message": message,
            "type": "api_error" if upstream else "server_error",
            "param": None,
            "code": kind,
        }
    }


RETRIED = frozenset({408, 409, 429})
"""Statuses below 500 the OpenAI SDKs retry (twice by default), as they retry every 5xx."""


def run_failed(status: int, body: dict[str, Any], trace: list[dict[str, Any]]) -> JSONResponse:
    """The answer to a run that failed after it may have called a tool (`called_tools`): a
    status the SDKs retry gets `x-should-retry: false`. A retry runs the request from the
    start and calls its tools again: one `parse()` whose answer failed its schema after a
    tool call ran the agent and its tool three times (newcomer-48 #3), a refund three times.
    Whether to send it again is the caller's decision, as for a run the stop cut."""
    response = JSONResponse(body, status_code=status)
    if (status >= 500 or status in RETRIED) and called_tools(trace):
        response.headers["x-should-retry"] = "false"
    return response
