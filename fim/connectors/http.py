"""HTTP connectors: each declared action becomes a tool `{connector}__{action}`.

One pooled `httpx.AsyncClient` per connector declaration lives in `Services`, so runs share
connections and a changed declaration (new token, new base_url) gets a fresh client. The
tool's arguments are split into path, query and JSON body from the action's declaration;
auth comes from the declaration (secrets already interpolated by the loader) and is never
echoed: every observation passes through a mask of the auth values and snapshot secrets.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fim.config.schema import HttpAction, HttpConnector
from fim.connectors.http_request import build_request, with_idempotency_key
from fim.connectors.render import render_json, truncate_text
from fim.masking import Masker
from fim.retries import Backoff, retry_async
from fim.tools.base import FunctionTool
from fim.types import ToolResult

RETRY_BACKOFF = 0.1
"""Seconds before the first retry; doubles each attempt (module-level so tests can shrink it)."""
_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE"})
_ERROR_EXCERPT = 1000
MAX_BODY_BYTES = 8 * 1024 * 1024
"""Bytes of a response body read at most; the observation is far smaller anyway."""


NAME_LIMIT = 64
"""Longest function name OpenAI, Anthropic and Gemini accept (all three: 64)."""
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(connector: str, action: str) -> str:
    """`{connector}__{action}`, made safe for every provider: characters outside
    `[A-Za-z0-9_-]` become `_` and a name over 64 characters keeps its first 55 and a digest
    of the whole. Deterministic (the same declaration always gives the same name) and
    collision-free in practice: two shortened names share a 32-bit digest only if their
    full names collide in SHA-256's first 8 hex digits."""
    full = f"{connector}__{action}"
    safe = _NAME_CHARS.sub("_", full)
    if len(safe) <= NAME_LIMIT and safe == full:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    if len(safe) <= NAME_LIMIT:
        return safe if safe == full else f"{safe[: NAME_LIMIT - 10]}_h{digest}"
    return f"{safe[: NAME_LIMIT - 10].rstrip('_')}_h{digest}"


def action_metadata(connector: str, action_name: str, action: HttpAction) -> dict[str, Any]:
    """What hooks need to know about an action (DESIGN §4: `HookContext.metadata`)."""
    return {
        "connector": connector,
        "action": action_name,
        "access": action.access,
        "requires_confirmation": action.requires_confirmation,
        "method": action.method,
        "path": action.path,
    }


def secrets_of(decl: HttpConnector) -> list[str]:
    auth = decl.auth
    if auth is None:
        return []
    values = {"bearer": ["token"], "api_key": ["key"], "basic": ["username", "password"]}
    found = [getattr(auth, field) for field in values[auth.type]]
    if auth.type == "basic":
        raw = f"{auth.username}:{auth.password}".encode()
        found.append(base64.b64encode(raw).decode())
    return [v for v in found if v]


class HttpConnectorClient:
    """The live side of one HTTP connector declaration."""

    def __init__(
        self, name: str, decl: HttpConnector, mask: Callable[[str], str] | None = None
    ) -> None:
        self.name = name
        self.decl = decl
        self._snapshot_mask = mask or (lambda text: text)
        self._masker = Masker(secrets_of(decl))
        self._client: Any = None

    def mask(self, text: str) -> str:
        """The connector's own credentials (in every encoding), then the snapshot's secrets."""
        return self._snapshot_mask(self._masker.text(text))

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._build_client()
        return self._client

    def _build_client(self) -> Any:
        # deferred: loading click costs tens of ms
        import httpx

        headers = dict(self.decl.headers)
        params: dict[str, str] = {}
        auth: Any = None
        spec = self.decl.auth
        if spec is not None and spec.type == "bearer":
            headers["Authorization"] = f"Bearer {spec.token}"
        elif spec is not None and spec.type == "api_key":
            if spec.location == "header":
                headers[spec.name] = spec.key
            else:
                params[spec.name] = spec.key
        elif spec is not None and spec.type == "basic":
            auth = httpx.BasicAuth(spec.username, spec.password)
        # deferred: loading fim.observe.http costs a few ms
        from fim.observe.http import inject_trace_headers

        return httpx.AsyncClient(
            base_url=self.decl.base_url.rstrip("/") + "/",
            headers=headers,
            params=params,
            auth=auth,
            timeout=self.decl.timeout,
            follow_redirects=True,
            event_hooks={"request": [inject_trace_headers]},
        )

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # ------------------------------------------------------------------ calls

    def build_request(self, action: HttpAction, args: dict[str, Any]) -> dict[str, Any]:
        """Split arguments into path, query and JSON body (`fim.connectors.http_request`);
        raises ValueError when a path parameter is missing or would move the URL."""
        return build_request(action, args)

    async def call(self, action_name: str, args: dict[str, Any]) -> ToolResult:
        # deferred: loading click costs tens of ms
        import httpx

        action = self.decl.actions[action_name]
        label = tool_name(self.name, action_name)
        try:
            request = self.build_request(action, args)
        except ValueError as exc:
            return ToolResult(
                content=f"Error: {label}: {exc}. The path is {action.path}; pass each "
                "parameter in the arguments, as the value the path names.",
                is_error=True,
            )
        with_idempotency_key(request, action.method)
        retries = self.decl.retries if action.method in _IDEMPOTENT else 0

        def worth_retry(exc: BaseException) -> bool:
            # A connect timeout is worth a retry; a read timeout means a slow server.
            if isinstance(exc, httpx.TimeoutException):
                return isinstance(exc, httpx.ConnectTimeout)
            return isinstance(exc, httpx.TransportError)

        try:
            fetched = await retry_async(
                lambda: self._fetch(request),
                Backoff(1 + retries, RETRY_BACKOFF),
                retry_on=worth_retry,
                retry_result=lambda got: got.status >= 500,
            )
        except httpx.TimeoutException:
            return ToolResult(
                content=f"Error: {label} timed out after {self.decl.timeout:g}s. The "
                "service is slow or down; try again later or ask for less data.",
                is_error=True,
            )
        except httpx.TransportError as exc:
            return ToolResult(
                content=self.mask(
                    f"Error: {label} could not reach {self.name} "
                    f"({type(exc).__name__}: {exc}). The service may be down."
                ),
                is_error=True,
            )
        return self._observation(fetched)

    async def _fetch(self, request: dict[str, Any]) -> _Fetched:
        """Send and read at most MAX_BODY_BYTES, so a huge response cannot exhaust memory."""
        async with self.client.stream(**request) as response:
            chunks: list[bytes] = []
            size = 0
            cut = False
            async for chunk in response.aiter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    cut = True
                    break
            body = b"".join(chunks)[:MAX_BODY_BYTES]
            return _Fetched(
                status=response.status_code,
                reason=response.reason_phrase,
                content_type=response.headers.get("content-type", ""),
                text=body.decode(response.encoding or "utf-8", errors="replace"),
                cut=cut,
            )

    def _observation(self, fetched: _Fetched) -> ToolResult:
        limit = self.decl.max_response_chars
        status = fetched.status
        meta = {"status": status}
        if status >= 400:
            excerpt = truncate_text(_body_text(fetched), _ERROR_EXCERPT)
            hint = _status_hint(status)
            content = f"[HTTP {status}] {excerpt}".rstrip() + (f"\n{hint}" if hint else "")
            return ToolResult(content=self.mask(content), is_error=True, metadata=meta)
        if not fetched.text:
            return ToolResult(content=f"[HTTP {status}] (empty response)", metadata=meta)
        data = _json_body(fetched)
        if data is not _NOT_JSON:
            return ToolResult(content=self.mask(render_json(data, limit)), metadata=meta)
        text = truncate_text(fetched.text, limit)
        if fetched.cut and len(fetched.text) <= limit:
            text += f"\n... [response larger than {MAX_BODY_BYTES} bytes; the rest was not read]"
        return ToolResult(content=self.mask(text), metadata=meta)


@dataclass
class _Fetched:
    status: int
    reason: str
    content_type: str
    text: str
    cut: bool


_NOT_JSON = object()


def _json_body(fetched: _Fetched) -> Any:
    if fetched.cut:
        return _NOT_JSON  # a cut document cannot be parsed; it is shown as text
    if "json" not in fetched.content_type and not fetched.text.lstrip().startswith(("{", "[")):
        return _NOT_JSON
    try:
        return json.loads(fetched.text)
    except ValueError:
        return _NOT_JSON


def _body_text(fetched: _Fetched) -> str:
    data = _json_body(fetched)
    if data is not _NOT_JSON:
        return json.dumps(data, ensure_ascii=False, separators=(", ", ": "))
    return fetched.text.strip() or fetched.reason


def _status_hint(status: int) -> str:
    return {
        400: "The request was rejected; check the arguments against the action's schema.",
        401: "Authentication failed; the connector's credentials are wrong or missing.",
        403: "Not permitted with these credentials; do not retry the same call.",
        404: "Not found; check the identifiers (discover the action or list first).",
        409: "Conflict with the current state; fetch the resource and retry if it makes sense.",
        422: "The service rejected the data; fix the fields named above.",
        429: "Rate limited; wait before calling again.",
    }.get(status, "The service failed; retrying later may help." if status >= 500 else "")


def get_client(
    services: Any, name: str, decl: HttpConnector, mask: Callable[[str], str] | None = None
) -> HttpConnectorClient:
    """The client of a declaration, shared by runs until the declaration changes."""
    digest = hashlib.sha256(decl.model_dump_json().encode()).hexdigest()[:12]
    return services.get(
        f"connector:http:{name}:{digest}",
        lambda: HttpConnectorClient(name, decl, mask),
        lambda client: client.aclose(),
    )


def action_tool(client: HttpConnectorClient, action_name: str) -> FunctionTool:
    """A legacy-mode tool for one action: its own name, schema and metadata."""
    action = client.decl.actions[action_name]

    async def run(**arguments: Any) -> ToolResult:
        return await client.call(action_name, arguments)

    description = action.description or f"{action.method} {action.path}"
    return FunctionTool(
        name=tool_name(client.name, action_name),
        description=f"{client.name}: {description}",
        parameters=action.parameters,
        fn=run,
        category="connector",
        metadata=action_metadata(client.name, action_name, action),
    )


__all__ = [
    "HttpConnectorClient",
    "action_metadata",
    "action_tool",
    "get_client",
    "tool_name",
]
