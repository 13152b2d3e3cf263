"""What every route answers with: the masked JSON body and errors in one shape.

`JSONResponse` masks every body as values before it is serialised, whichever route built
it; `error` gives every failure OpenAI's error shape, so one client-side handler reads
them all (`fim.server.openai_errors` builds on it). Kept apart from the middleware, which
answers with them too.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse as _JSONResponse

from fim.masking import known


class JSONResponse(_JSONResponse):
    """Every JSON body of the API, masked as values (`fim.masking.known`) before it is
    serialised: a secret never leaves in any encoding, whichever route built the body."""

    def render(self, content: Any) -> bytes:
        return super().render(known().value(content))


BEARER = 'Bearer realm="fim"'
"""The `WWW-Authenticate` challenge of every 401: a bearer key (RFC 6750)."""
INVALID_TOKEN = BEARER + ', error="invalid_token"'
"""The challenge when the key sent is not one of the server's (RFC 6750 section 3.1)."""

_CODES = {
    400: "invalid_request",
    401: "invalid_api_key",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "request_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
    499: "client_closed_request",
    503: "unavailable",
}


def error(
    status: int,
    message: str,
    hint: str | None = None,
    *,
    param: str | None = None,
    code: str | None = None,
) -> JSONResponse:
    """An error in OpenAI's shape (`message`, `type`, `param`, `code`) on every route, so
    one client-side handler reads them all; `hint` is fim's own addition, also at the end
    of `message` (`with_hint`)."""
    kind = (
        "server_error"
        if status >= 500
        else "authentication_error"
        if status == 401
        else "invalid_request_error"
    )
    body: dict[str, Any] = {
        "error": {
            "message": with_hint(message, hint),
            "type": kind,
            "param": param,
            "code": code or _CODES.get(status, "server_error" if status >= 500 else "error"),
        }
    }
    if hint:
        body["error"]["hint"] = hint
    # RFC 6750: a 401 names the scheme it wants, which clients and proxies read
    headers = {"WWW-Authenticate": BEARER} if status == 401 else None
    return JSONResponse(body, status_code=status, headers=headers)


def jsonrpc_error(code: int, message: str) -> JSONResponse:
    """A JSON-RPC 2.0 error answer (A2A's and MCP's requests fim refuses before their SDKs
    read them: `-32700` not JSON, `-32600` an invalid request, `-32602` bad params), as a
    400 with no id (the request's own may be what is wrong)."""
    answer = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return JSONResponse(answer, status_code=400)


def with_hint(message: str, hint: str | None) -> str:
    """`message (hint)`: the OpenAI SDKs show only an error's `message` (`str(exc)` of
    `openai.APIStatusError`), so the fix fim knows (`set OPENAI_API_KEY, ...`) would never
    reach their users from the `hint` field alone, which stays for clients that read it."""
    if not hint or hint in message:
        return message
    return f"{message} ({hint})"
