"""A served run refused before its first event, answered as what it is: the server's
configuration (newcomer-52 #5).

A run whose agent uses a connector or MCP server whose `${VAR}` is unset here, or a skill
that failed to load, is refused by its plan before anything runs (`fim.run.plan`). The
client used to get a 500 `server_error`; the request is fine, the server lacks something,
and retrying fails alike. So the refusal is a 503 with a code of its own
(`connector_unavailable` for a connector or MCP server, `agent_unavailable` otherwise) and
`x-should-retry: false`, as a missing model key answers `model_not_configured`. The run
itself is still recorded with its `refused` error event and logged (`fim.server.api.Api`).

A streamed run is refused the same way: its stream holds the headers until the run's
first event (`fim.server.streams.EventStream.held`), so a refusal is a 503 answer, not a
200 stream whose only frame is an error.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from fim.errors import FimError, RunError
from fim.server.replies import error

NO_RETRY = {"x-should-retry": "false"}
"""Tells the OpenAI SDKs (python and node read it before the status) not to retry: the
same request fails alike until the server is configured (a refusal here, a missing model
key in `fim.server.agent_routes.not_configured`)."""
DEFAULT_CODE = "agent_unavailable"


def refusal(exc: FimError) -> Response:
    """The answer to a run refused before it started for `exc`: its own answer when it has
    one (a key over its limits: 429), else a 503 with the error's `code`, not retried."""
    own = getattr(exc, "response", None)
    if callable(own):
        answer: Response = own()
        return answer
    if isinstance(exc, RunError):
        message, hint = exc.message, exc.hint
    else:
        message, hint = str(exc), None
    code = getattr(exc, "code", None) or DEFAULT_CODE
    response = error(503, f"{message}; nothing ran", hint, code=code)
    response.headers.update(NO_RETRY)
    return response


def refused(trace: list[dict[str, Any]]) -> bool:
    """Whether a run's trace (`Api.run_to_end`'s) says it was refused before it started:
    no event but its `refused` error (`fim.server.api`)."""
    return all(e.get("type") == "error" and e.get("kind") == "refused" for e in trace)
