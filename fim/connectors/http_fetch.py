"""Fetching an HTTP connector's response: the pooled client, retries, the whole-request
deadline, redirects and the bounded body read.

Redirects are followed by hand, at most `MAX_REDIRECTS` hops, and the credentials (the
`auth:`, every `headers:` entry and the action's own headers) go only to the connector's own
origin, the scheme, host and port of `base_url` (or its https upgrade). A hop to another
origin is sent without them, as a browser does: an API that redirects a download to a
presigned URL (S3, GCS, a CDN) expects exactly that, since the URL carries its own signature
and S3 refuses a request that carries an Authorization header too. httpx strips only
`Authorization`, so an `X-API-Key` went to whatever host a redirect named. A hop to another
host also passes web_fetch's guard: no loopback, private or link-local address unless the
connector's own host is one (an API on 127.0.0.1 or in the office network may send callers
to its neighbours), and the connection goes to the address the guard vetted. Which of the
two the own host is, internal or public, is decided once, at its first resolution (`_inside`):
a connector on a public host never connects to an internal address afterwards, so a vendor's
DNS (or a rebinding attacker's) cannot send a call and its credentials where a redirect may
not. Through a proxy of the environment (`HTTPS_PROXY` ...) the proxy resolves the names;
every request it does not carry connects to a vetted address (`_pinned.proxy_mounts`).

The body is read up to `MAX_BODY_BYTES` decoded bytes, decompressed a bounded step at a time
(`fim.tools.builtin._body`); it is decoded (in a web encoding only) where it is rendered
(`fim.connectors.http_observation`). The connector's `timeout` bounds each network
operation and one attempt as a whole, so a server sending a byte a second cannot hold a
workflow node for ever. Kept apart from the client's call so what leaves the process, and
to which host, can be reviewed on its own. A call whose arguments name one of the
connector's credentials is refused before anything is sent (`http_secrets.credential_names`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fim.config.schema import HttpAction, HttpConnector, WebFetchSettings
from fim.connectors.http_arguments import override_names
from fim.connectors.http_observation import Fetched
from fim.connectors.http_request import outgoing, split_base
from fim.connectors.http_secrets import clashes, credential_names, own_credentials, spelling
from fim.retries import Backoff, retry_async
from fim.tools.builtin._body import ACCEPT_ENCODING, codec_of, read_body
from fim.tools.builtin.web_fetch import MAX_REDIRECTS, Blocked, Guard

if TYPE_CHECKING:
    import httpx

RETRY_BACKOFF = 0.1
"""Seconds before the first retry; doubles each attempt (module-level so tests can shrink it)."""
_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE"})
MAX_BODY_BYTES = 8 * 1024 * 1024
"""Bytes of a response body read at most; the observation is far smaller anyway."""
_DEFAULT_PORTS = {"http": 80, "https": 443}
_NEVER_ACROSS = ("authorization", "proxy-authorization", "cookie")
"""Headers no hop to another origin carries, whoever set them."""


class Refused(Exception):
    """A response the connector does not follow or read; the message says why."""


class Overdue(Exception):
    """One attempt took longer than the connector's `timeout` as a whole."""


def _no_cookies() -> Any:
    """A cookie jar that keeps nothing: one client serves every run and key of the
    declaration, so a cookie a service set for one run (a session, a CSRF token) would go
    out with the next run's calls, another tenant's included. A connector's credentials
    are declared (`auth:`, `headers:`), never picked up."""
    # deferred: http.cookiejar only with a connector's client
    from http.cookiejar import CookieJar, DefaultCookiePolicy

    # a jar, not `httpx.Cookies`: httpx copies a `Cookies` into a jar of its own, policy lost
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


class Fetcher:
    """The network side of one connector declaration: its httpx client, which holds no
    credential, and every request's trip through retries, redirects and the deadline."""

    def __init__(self, decl: HttpConnector) -> None:
        self.decl = decl
        self._client: Any = None
        self._basic: Any = None
        self._guard: Guard | None = None
        self._internal: bool | None = None
        """Whether `base_url`'s host is internal, decided at its first resolution."""
        self._headers, self._params = own_credentials(decl)
        """Headers and query parameters of the connector's own origin."""
        self._base_url, self._base_query = split_base(decl.base_url)
        """`base_url` without its query, and the query every call sends (`outgoing`)."""

    @functools.cached_property
    def _origin(self) -> tuple[str, str, int, str]:
        """`base_url`'s scheme, host and port as httpx reads every other URL (so they
        compare), and the host as a connection names it (IDNA, for `_vet`)."""
        # deferred: loading httpx costs tens of ms
        import httpx

        base = httpx.URL(self.decl.base_url)
        port = base.port or _port(base.scheme)
        return base.scheme, base.host.lower(), port, base.raw_host.decode("ascii").lower()

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._build_client()
        return self._client

    def _build_client(self) -> Any:
        """An httpx client holding no credential: `_sign` adds them per request, to the
        connector's own origin only. A request a proxy of the environment carries goes to
        it (the proxy resolves the name); any other connects through the pinned transport
        (`_vet`)."""
        # deferred: loading click costs tens of ms
        import httpx

        # deferred: loading fim.observe.http costs a few ms
        from fim.observe.http import inject_trace_headers

        # deferred: with httpx, only when a connector is called
        from fim.tools.builtin._pinned import pinned_transport, proxy_mounts

        spec = self.decl.auth
        if spec is not None and spec.type == "basic":
            self._basic = httpx.BasicAuth(spec.username, spec.password)
        return httpx.AsyncClient(
            base_url=self._base_url,
            headers={"Accept-Encoding": ACCEPT_ENCODING},
            cookies=_no_cookies(),
            timeout=self.decl.timeout,
            follow_redirects=False,
            event_hooks={"request": [inject_trace_headers]},
            transport=pinned_transport(self._vet),
            mounts=proxy_mounts(),
        )

    def outgoing(self, request: dict[str, Any]) -> Any:
        """The httpx request `request` is sent as, before credentials (`outgoing`)."""
        return outgoing(self.client, request, self._base_query)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def fetch(self, action: HttpAction, request: dict[str, Any]) -> Fetched:
        """The response to `request` (`fim.connectors.http_request`), an idempotent method
        retried up to the connector's `retries` on a connect failure or a 5xx. Raises what
        the last attempt raised: httpx's errors, `Overdue`, `Refused`, `Blocked`,
        `BodyRefused`."""
        # deferred: loading httpx costs tens of ms
        import httpx

        self.refuse(action, request)
        retries = self.decl.retries if action.method in _IDEMPOTENT else 0

        def worth_retry(exc: BaseException) -> bool:
            # A connect timeout is worth a retry; a read timeout means a slow server; a URL
            # that is not http(s) (an empty base_url) fails the same way every time.
            if isinstance(exc, httpx.TimeoutException):
                return isinstance(exc, httpx.ConnectTimeout)
            if isinstance(exc, httpx.UnsupportedProtocol):
                return False
            return isinstance(exc, httpx.TransportError)

        return await retry_async(
            lambda: self._attempt(action, request),
            Backoff(1 + retries, RETRY_BACKOFF),
            retry_on=worth_retry,
            retry_result=lambda got: got.status >= 500,
        )

    def refuse(self, action: HttpAction, request: dict[str, Any]) -> None:
        """Raise `Refused` when the model's arguments name one of the connector's
        credentials (`credential_names`): sent beside the connector's own, or in its place,
        the model's key would make the call as another account (a prompt-injected model
        pointing the connector at the attacker's); or a method override
        (`http_arguments.override_names`): `_method=delete` makes a declared read POST a
        DELETE to Rails or Laravel. Refused rather than dropped: a model that sends it is
        confused or hostile, and the caller should know."""
        overrides = override_names(request)
        if overrides:
            raise Refused(
                f"argument{'s' if len(overrides) > 1 else ''} {', '.join(overrides)} would "
                f"make this {action.method} another method (web frameworks route a request "
                "by a `_method` or `X-HTTP-Method-Override` field), so fim never sends one; "
                "call again without it"
            )
        in_query, in_body = credential_names(self.decl, action)
        found = clashes(request.get("params") or {}, in_query)
        for part in ("json", "data", "files"):
            fields = request.get(part)
            if isinstance(fields, dict):
                found += [n for n in clashes(fields, in_body) if n not in found]
        if len(found) == 1:
            raise Refused(
                f"argument {found[0]} is the connector's own credential, which it adds to "
                "every request itself; a call may not set or replace it (call again without it)"
            )
        if found:
            raise Refused(
                f"arguments {', '.join(found)} are the connector's own credentials, which it "
                "adds to every request itself; a call may not set or replace them (call "
                "again without them)"
            )

    async def _attempt(self, action: HttpAction, request: dict[str, Any]) -> Fetched:
        """One try of the request, bounded as a whole by the connector's `timeout`: httpx's
        timeout bounds each network operation, which a server sending a byte a second never
        trips (8 MiB would take 97 days)."""
        try:
            async with asyncio.timeout(self.decl.timeout):
                return await self._fetch(action, request)
        except TimeoutError:
            raise Overdue from None

    async def _fetch(self, action: HttpAction, request: dict[str, Any]) -> Fetched:
        """Send, following redirects by hand (`_hop`), and read at most MAX_BODY_BYTES of
        the decoded body, so a huge or compressed response cannot exhaust memory."""
        client = self.client
        sending = self.outgoing(request)
        self._sign(sending)
        for _ in range(MAX_REDIRECTS + 1):
            auth = self._basic if self._own(sending.url) else None
            response = await client.send(sending, auth=auth, stream=True)
            try:
                if not response.has_redirect_location:
                    cap = MAX_BODY_BYTES
                    body, cut = await read_body(response, cap)
                    return Fetched(
                        status=response.status_code,
                        reason=response.reason_phrase,
                        content_type=response.headers.get("content-type", ""),
                        body=body,
                        codec=codec_of(response),
                        cut=cut,
                        cap=cap,
                    )
                sending = await self._hop(action, sending, response)
            finally:
                await response.aclose()
        raise Refused(
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
        """Add the connector's credentials and headers to a request for its own origin. An
        action's own headers of the same name win (the author declared both; no call sets
        a header), but the query credential always replaces any parameter spelled like it
        (`spelling`): a redirect back to the own origin (`?api_key=<another>`, an open
        redirect the model steered) would otherwise make the call as another account."""
        if not self._own(request.url):
            return
        for name, value in self._headers.items():
            if name not in request.headers:
                request.headers[name] = value
        if not self._params:
            return
        url, ours = request.url, {spelling(name) for name in self._params}
        if any(spelling(name) in ours for name in url.params):
            kept = tuple((k, v) for k, v in url.params.multi_items() if spelling(k) not in ours)
            url = url.copy_with(query=None).copy_merge_params(kept)
        request.url = url.copy_merge_params(self._params)

    def _own(self, url: httpx.URL) -> bool:
        """Whether `url` is the connector's own origin, or its upgrade to https."""
        scheme, host, port, _ = self._origin
        there = (url.scheme, url.host.lower(), url.port or _port(url.scheme))
        upgrade = (scheme, port, there[0], there[2]) == ("http", 80, "https", 443)
        return there == (scheme, host, port) or (upgrade and there[1] == host)

    async def _inside(self, ips: list[Any] | None = None) -> bool:
        """Whether the connector's own host is internal (resolves to an address web_fetch's
        guard refuses: a developer's API on localhost, a service in the office network),
        decided once from its first resolution (`ips`, when the caller has it) and kept
        for the connector's life: a host judged public stays public, whatever its DNS
        answers next. A host that does not resolve yet is decided later."""
        if self._internal is None:
            _, _, port, host = self._origin
            if ips is not None:
                internal = Guard.inside(ips)
            else:
                try:
                    internal = Guard.inside(await Guard.resolve(host, port))
                except Blocked:
                    return False  # undecided: public for this call
            if self._internal is None:  # a concurrent first call may have decided
                self._internal = internal
        return self._internal

    async def _hop_guard(self) -> Guard:
        """web_fetch's guard for hosts other than the connector's own: private addresses
        pass only when the connector's own host is internal (`_inside`)."""
        if self._guard is None:
            internal = await self._inside()
            hint = "A connector on a public host is not redirected to an internal one"
            self._guard = Guard(WebFetchSettings(allow_private=internal), hint)
        return self._guard

    async def _vet(self, host: str, port: int) -> Sequence[Any]:
        """The addresses a new connection may go to (the pinned transport asks): any other
        host only past the guard; the connector's own host as it resolves when it is
        internal, and only to public addresses when it was public at first (raises
        Blocked: the call is refused, its credentials never sent)."""
        if host.lower() != self._origin[3]:
            return await (await self._hop_guard()).addresses(host, port)
        try:
            ips = await Guard.resolve(host, port)
        except Blocked as exc:  # the service is unreachable (retried), not a blocked hop
            # deferred: httpcore loads with httpx
            import httpcore

            raise httpcore.ConnectError(str(exc)) from None
        if await self._inside(ips):
            return ips
        hint = (
            "A connector whose host first resolved to a public address never connects to "
            "an internal one; if the service really moved, restart fim"
        )
        try:
            return Guard(WebFetchSettings(), hint).vetted(host, ips)
        except Blocked as exc:
            raise Blocked(f"the connector's own host changed address: {exc}") from None


def _port(scheme: str) -> int:
    return _DEFAULT_PORTS.get(scheme.lower(), 0)
