"""HTTP connectors: each declared action becomes a tool `{connector}__{action}`.

One pooled `httpx.AsyncClient` per connector declaration lives in `Services`, so runs share
connections and a changed declaration (new token, new base_url) gets a fresh client. The
tool's arguments are split into path, query and JSON body from the action's declaration;
auth comes from the declaration (secrets already interpolated by the loader) and is never
echoed: every observation passes through a mask of the auth values and snapshot secrets,
applied before the observation is cut to `max_response_chars` (a cut that kept all but the
last characters of an echoed key would show them: the model pads a query value to slide it).

Redirects are followed by hand, at most `MAX_REDIRECTS` hops, and the credentials (the
`auth:`, every `headers:` entry and the action's own headers) go only to the connector's own
origin, the scheme, host and port of `base_url` (or its https upgrade). A hop to another
origin is sent without them, as a browser does: an API that redirects a download to a
presigned URL (S3, GCS, a CDN) expects exactly that, since the URL carries its own signature
and S3 refuses a request that carries an Authorization header too. httpx strips only
`Authorization`, so an `X-API-Key` went to whatever host a redirect named. A hop to another
host also passes web_fetch's guard: no loopback, private or link-local address unless the
connector's own host is one (an API on 127.0.0.1 or in the office network may send callers
to its neighbours), and the connection goes to the address the guard vetted.

The body is read up to `MAX_BODY_BYTES` decoded bytes, decompressed a bounded step at a time
(`fim.tools.builtin._body`), as text in a web encoding only; a JSON document nested deeper
than the parser follows is an error observation. The connector's `timeout` bounds each
network operation and one attempt as a whole, so a server sending a byte a second cannot
hold a workflow node for ever. A body over `IN_LOOP_BYTES` is decoded, parsed and rendered
in a killable worker (`fim.tools.isolate`): 8 MiB of tiny JSON arrays took 3 s of the
event loop, every run of the server waiting.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pydantic_core

from fim.config.schema import HttpAction, HttpConnector, WebFetchSettings
from fim.connectors.http_request import build_request, with_idempotency_key
from fim.connectors.render import render_json, truncate_text
from fim.locks import slots
from fim.masking import Masker, header_secrets, known
from fim.retries import Backoff, retry_async
from fim.tools.base import FunctionTool
from fim.tools.builtin._body import ACCEPT_ENCODING, BodyRefused, codec_of, read_body, text_of
from fim.tools.builtin.web_fetch import MAX_REDIRECTS, Blocked, Guard, proxied
from fim.types import ToolResult

if TYPE_CHECKING:
    import httpx

RETRY_BACKOFF = 0.1
"""Seconds before the first retry; doubles each attempt (module-level so tests can shrink it)."""
_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE"})
_ERROR_EXCERPT = 1000
MAX_BODY_BYTES = 8 * 1024 * 1024
"""Bytes of a response body read at most; the observation is far smaller anyway."""
IN_LOOP_BYTES = 256 * 1024
"""A body up to this size is rendered on the event loop (a few ms at most; a worker's round
trip costs more than that); a larger one in a worker, killed past `RENDER_SECONDS`."""
RENDER_SECONDS = 10.0
"""How long the worker may take to read a large body (8 MiB of JSON: about 3 s)."""
RENDER_MEMORY = 512 * 1024 * 1024
"""Address space of the worker reading a large body: 8 MiB of tiny JSON values are
Python objects of about 250 MB. Past it the body is shown as text."""
PARTY_SLOTS = 2
"""Workers one connector's large bodies may hold at once: the rest wait for each other."""
_DEFAULT_PORTS = {"http": 80, "https": 443}
_NEVER_ACROSS = ("authorization", "proxy-authorization", "cookie")
"""Headers no hop to another origin carries, whoever set them."""


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
    """What the connector's masker hides: every `auth:` value (and basic's encoded pair),
    and every value of its and its actions' `headers:` that could be a credential
    (`fim.masking.header_secret`): a service echoing request headers showed the model an
    `X-Custom-Key` written as a literal or a `${VAR:-default}`, whose name no rule knows."""
    found = sorted(header_secrets(decl.headers))
    for action in decl.actions.values():
        found += sorted(header_secrets(action.headers))
    auth = decl.auth
    if auth is None:
        return found
    values = {"bearer": ["token"], "api_key": ["key"], "basic": ["username", "password"]}
    found += [getattr(auth, field) for field in values[auth.type]]
    if auth.type == "basic":
        raw = f"{auth.username}:{auth.password}".encode()
        found.append(base64.b64encode(raw).decode())
    return [v for v in found if v]


def _no_cookies() -> Any:
    """A cookie jar that keeps nothing: one client serves every run and key of the
    declaration, so a cookie a service set for one run (a session, a CSRF token) would go
    out with the next run's calls, another tenant's included. A connector's credentials
    are declared (`auth:`, `headers:`), never picked up."""
    # deferred: http.cookiejar only with a connector's client
    from http.cookiejar import CookieJar, DefaultCookiePolicy

    # a jar, not `httpx.Cookies`: httpx copies a `Cookies` into a jar of its own, policy lost
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


class HttpConnectorClient:
    """The live side of one HTTP connector declaration."""

    def __init__(
        self, name: str, decl: HttpConnector, mask: Callable[[str], str] | None = None
    ) -> None:
        self.name = name
        self.decl = decl
        self._snapshot_mask = mask or (lambda text: text)
        self._masker = Masker(secrets_of(decl))
        self._cutting: tuple[Masker, Masker] | None = None
        self._client: Any = None
        self._basic: Any = None
        self._guard: Guard | None = None
        self._headers = dict(decl.headers)
        """Headers of the connector's own origin: `headers:` and the api key or token."""
        self._params: dict[str, str] = {}
        spec = decl.auth
        if spec is not None and spec.type == "bearer":
            self._headers["Authorization"] = f"Bearer {spec.token}"
        elif spec is not None and spec.type == "api_key":
            if spec.location == "header":
                self._headers[spec.name] = spec.key
            else:
                self._params[spec.name] = spec.key

    def mask(self, text: str) -> str:
        """The connector's own credentials (in every encoding), then the snapshot's secrets."""
        return self._snapshot_mask(self._masker.text(text))

    @functools.cached_property
    def _origin(self) -> tuple[str, str, int, str]:
        """`base_url`'s scheme, host and port as httpx reads every other URL (so they
        compare), and the host as a connection names it (IDNA, for `_vet`)."""
        # deferred: loading httpx costs tens of ms
        import httpx

        base = httpx.URL(self.decl.base_url)
        port = base.port or _port(base.scheme)
        return base.scheme, base.host.lower(), port, base.raw_host.decode("ascii").lower()

    def _cut_masker(self) -> Masker:
        """The masker a cut is made with: the connector's credentials and every secret the
        process has loaded (`known()`, which holds every snapshot's, so the snapshot's mask
        handed in is covered too), rebuilt only when `known()` grew."""
        current = known()
        if self._cutting is None or self._cutting[0] is not current:
            self._cutting = (current, self._masker.union(current))
        return self._cutting[1]

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._build_client()
        return self._client

    def _build_client(self) -> Any:
        """An httpx client holding no credential: `_sign` adds them per request, to the
        connector's own origin only. It connects through the pinned transport (`_vet`),
        unless the environment names a proxy, which then resolves the names."""
        # deferred: loading click costs tens of ms
        import httpx

        # deferred: loading fim.observe.http costs a few ms
        from fim.observe.http import inject_trace_headers

        # deferred: with httpx, only when a connector is called
        from fim.tools.builtin._pinned import pinned_transport

        spec = self.decl.auth
        if spec is not None and spec.type == "basic":
            self._basic = httpx.BasicAuth(spec.username, spec.password)
        direct = {} if proxied() else {"transport": pinned_transport(self._vet)}
        return httpx.AsyncClient(
            base_url=self.decl.base_url.rstrip("/") + "/",
            headers={"Accept-Encoding": ACCEPT_ENCODING},
            cookies=_no_cookies(),
            timeout=self.decl.timeout,
            follow_redirects=False,
            event_hooks={"request": [inject_trace_headers]},
            **direct,  # type: ignore[arg-type]
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
                lambda: self._attempt(action, request),
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
        except _Overdue:
            return ToolResult(
                content=f"Error: {label} timed out after {self.decl.timeout:g}s, the "
                f"connector's timeout for a whole request: {self.name} was still sending "
                "its response. Try again later or ask for less data.",
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
        except (Blocked, BodyRefused, _Refused) as exc:
            return ToolResult(
                content=self.mask(f"Error: {label}: {exc}. Do not retry the same call."),
                is_error=True,
            )
        except httpx.InvalidURL as exc:
            return ToolResult(
                content=self.mask(f"Error: {label}: the service redirected to a bad URL ({exc})."),
                is_error=True,
            )
        return await self._observation(fetched)

    async def _attempt(self, action: HttpAction, request: dict[str, Any]) -> _Fetched:
        """One try of the request, bounded as a whole by the connector's `timeout`: httpx's
        timeout bounds each network operation, which a server sending a byte a second never
        trips (8 MiB would take 97 days)."""
        try:
            async with asyncio.timeout(self.decl.timeout):
                return await self._fetch(action, request)
        except TimeoutError:
            raise _Overdue from None

    async def _fetch(self, action: HttpAction, request: dict[str, Any]) -> _Fetched:
        """Send, following redirects by hand (`_hop`), and read at most MAX_BODY_BYTES of
        the decoded body, so a huge or compressed response cannot exhaust memory."""
        client = self.client
        sending = client.build_request(**request)
        self._sign(sending)
        for _ in range(MAX_REDIRECTS + 1):
            auth = self._basic if self._own(sending.url) else None
            response = await client.send(sending, auth=auth, stream=True)
            try:
                if not response.has_redirect_location:
                    body, cut = await read_body(response, MAX_BODY_BYTES)
                    return _Fetched(
                        status=response.status_code,
                        reason=response.reason_phrase,
                        content_type=response.headers.get("content-type", ""),
                        body=body,
                        codec=codec_of(response),
                        cut=cut,
                    )
                sending = await self._hop(action, sending, response)
            finally:
                await response.aclose()
        raise _Refused(
            f"the service redirected more than {MAX_REDIRECTS} times; call the final URL's "
            "action directly"
        )

    async def _hop(
        self, action: HttpAction, previous: httpx.Request, response: httpx.Response
    ) -> httpx.Request:
        """The request a redirect asks for, as httpx would build it (303, and 301/302 after
        a POST, become a GET without the body), then: to the connector's own origin with its
        credentials, to any other without them, and to another host only past the guard."""
        # deferred: loading httpx costs tens of ms
        import httpx

        url = previous.url.join(response.headers["location"])
        if url.scheme not in _DEFAULT_PORTS:
            raise Blocked(f"the service redirected to a '{url.scheme}' URL, which is not http")
        if url.host.lower() != self._origin[1]:
            try:
                await (await self._hop_guard()).check(str(url))
            except Blocked as exc:
                raise Blocked(f"the service redirected to another host, and {exc}") from None
        method, status = previous.method, response.status_code
        if (status in (302, 303) and method != "HEAD") or (status == 301 and method == "POST"):
            method = "GET"
        headers = httpx.Headers(previous.headers)
        headers["Host"] = url.netloc.decode("ascii")
        stream: Any = previous.stream
        if method != previous.method:
            stream = None
            for name in ("Content-Length", "Content-Type", "Transfer-Encoding"):
                headers.pop(name, None)
        if not self._own(url):
            declared = {*self._headers, *(action.headers or {}), *_NEVER_ACROSS}
            for name in declared:
                headers.pop(name, None)
            for name, value in self._params.items():
                if url.params.get(name) == value:
                    url = url.copy_remove_param(name)
        nxt = httpx.Request(method, url, headers=headers, stream=stream)
        self._sign(nxt)
        return nxt

    def _sign(self, request: httpx.Request) -> None:
        """Add the connector's credentials and headers to a request for its own origin; an
        action's own headers or query parameters of the same name win, as before."""
        if not self._own(request.url):
            return
        for name, value in self._headers.items():
            if name not in request.headers:
                request.headers[name] = value
        missing = {k: v for k, v in self._params.items() if k not in request.url.params}
        if missing:
            request.url = request.url.copy_merge_params(missing)

    def _own(self, url: httpx.URL) -> bool:
        """Whether `url` is the connector's own origin, or its upgrade to https."""
        scheme, host, port, _ = self._origin
        there = (url.scheme, url.host.lower(), url.port or _port(url.scheme))
        upgrade = (scheme, port, there[0], there[2]) == ("http", 80, "https", 443)
        return there == (scheme, host, port) or (upgrade and there[1] == host)

    async def _hop_guard(self) -> Guard:
        """web_fetch's guard for hosts other than the connector's own: private addresses
        pass only when the connector's own host is one (decided once, on the first hop)."""
        if self._guard is None:
            _, _, port, host = self._origin
            internal = await Guard.internal(host, port)
            hint = "A connector on a public host is not redirected to an internal one"
            self._guard = Guard(WebFetchSettings(allow_private=internal), hint)
        return self._guard

    async def _vet(self, host: str, port: int) -> Sequence[Any]:
        """The addresses a new connection may go to (the pinned transport asks): the
        connector's own host as it resolves, any other host only past the guard."""
        if host.lower() != self._origin[3]:
            return await (await self._hop_guard()).addresses(host, port)
        try:
            return await Guard.resolve(host, port)
        except Blocked as exc:  # the service is unreachable (retried), not a blocked hop
            # deferred: httpcore loads with httpx
            import httpcore

            raise httpcore.ConnectError(str(exc)) from None

    async def _observation(self, fetched: _Fetched) -> ToolResult:
        """The observation of a response, masked before anything of it is cut (`_observed`):
        on the event loop for a small body, in a killable worker for a large one."""
        masker = self._cut_masker()
        limit = self.decl.max_response_chars
        meta = {"status": fetched.status}
        if len(fetched.body) <= IN_LOOP_BYTES:
            content, is_error = _observed(fetched, limit, masker)
            return ToolResult(content=self.mask(content), is_error=is_error, metadata=meta)
        # deferred: loading fim.tools.isolate costs a few ms
        from fim.tools import isolate

        try:
            async with slots(("isolate", "connector", self.name), PARTY_SLOTS):
                content, is_error = await isolate.call(
                    _observed,
                    fetched,
                    limit,
                    masker,
                    timeout=RENDER_SECONDS,
                    memory=RENDER_MEMORY,
                )
        except isolate.Stopped as exc:
            return ToolResult(
                content=f"Error: [HTTP {fetched.status}] the response ({len(fetched.body)} "
                f"bytes) is too costly to read: {exc}. Ask for less data.",
                is_error=True,
                metadata=meta,
            )
        return ToolResult(content=self.mask(content), is_error=is_error, metadata=meta)


def _observed(fetched: _Fetched, limit: int, masker: Masker) -> tuple[str, bool]:
    """The text of a response's observation and whether it is an error, masked by `masker`
    before anything is cut. Module-level: a large body is read in a worker process."""
    status = fetched.status
    if status >= 400:
        excerpt = _shown(_body_text(fetched), _ERROR_EXCERPT, masker, fetched.cut)
        hint = _status_hint(status)
        return f"[HTTP {status}] {excerpt}".rstrip() + (f"\n{hint}" if hint else ""), True
    if not fetched.text:
        return f"[HTTP {status}] (empty response)", False
    data = _json_body(fetched)
    if data is _TOO_DEEP:
        return (
            f"Error: [HTTP {status}] the response is JSON nested too deeply to read (its "
            "nesting is past the JSON parser's limit). Ask for less data or a flatter "
            "representation.",
            True,
        )
    if data is not _NOT_JSON:
        return render_json(data, limit, masker), False
    text = _shown(fetched.text, limit, masker, fetched.cut)
    if fetched.cut and len(fetched.text) <= limit:
        text += f"\n... [response larger than {MAX_BODY_BYTES} bytes; the rest was not read]"
    return text, False


class _Refused(Exception):
    """A response the connector does not follow or read; the message says why."""


class _Overdue(Exception):
    """One attempt took longer than the connector's `timeout` as a whole."""


def _port(scheme: str) -> int:
    return _DEFAULT_PORTS.get(scheme.lower(), 0)


def _shown(text: str, limit: int, masker: Masker, cut: bool) -> str:
    """`text` masked and cut to `limit` (`truncate_text`); a body the byte cap cut ends in
    a cut of its own, whose edge is masked too when it is shown."""
    shown = truncate_text(text, limit, masker)
    return masker.edge(shown) if cut and len(text) <= limit else shown


@dataclass
class _Fetched:
    """A response as read: its body's bytes, decoded only where it is rendered."""

    status: int
    reason: str
    content_type: str
    body: bytes
    codec: str
    """What the body is read with (`fim.tools.builtin._body.codec_of`)."""
    cut: bool

    @functools.cached_property
    def text(self) -> str:
        return text_of(self.body, self.codec)


_NOT_JSON = object()
_TOO_DEEP = object()


def _json_body(fetched: _Fetched) -> Any:
    """The parsed body, `_NOT_JSON`, or `_TOO_DEEP`: pydantic-core's parser (as for the
    server's request bodies) stops at its own nesting limit without Python recursion,
    where `json.loads` raised RecursionError out of the call on 100,000 nested arrays."""
    if fetched.cut:
        return _NOT_JSON  # a cut document cannot be parsed; it is shown as text
    if "json" not in fetched.content_type and not fetched.text.lstrip().startswith(("{", "[")):
        return _NOT_JSON
    try:
        return pydantic_core.from_json(fetched.text)
    except ValueError as exc:
        return _TOO_DEEP if "recursion limit" in str(exc) else _NOT_JSON
    except MemoryError:  # past the worker's address space: shown as text
        return _NOT_JSON


def _body_text(fetched: _Fetched) -> str:
    data = _json_body(fetched)
    if data is not _NOT_JSON and data is not _TOO_DEEP:
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


class _ActionTool(FunctionTool):
    """An action's tool. Its schema may be a third party's (an imported OpenAPI spec), so
    the registry checks arguments against it in the killable worker pool, as an MCP
    server's (`fim.tools.isolate.schema_problems`): legacy calls and workflow nodes alike."""

    untrusted_schema = True


def action_tool(client: HttpConnectorClient, action_name: str) -> FunctionTool:
    """A legacy-mode tool for one action: its own name, schema and metadata."""
    action = client.decl.actions[action_name]

    async def run(**arguments: Any) -> ToolResult:
        return await client.call(action_name, arguments)

    description = action.description or f"{action.method} {action.path}"
    return _ActionTool(
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
