"""web_fetch: GET a web page or API and return its readable text, behind an SSRF guard.

An agent that can fetch any URL can be talked into reading the cloud metadata endpoint or
an internal admin page, so every hop (the first URL and each redirect, followed by hand)
has its host resolved and refused when any address is loopback, private, link-local,
multicast, reserved or otherwise not globally routable — unless fim.yaml allows it with
`web_fetch: {allow_private: true}` or lists the host in `web_fetch.allow_hosts`.

The connection goes to an address the guard vetted, not to the name resolved again
(`fim.tools.builtin._pinned`), so a DNS server answering differently on a second lookup
(DNS rebinding) changes nothing. Through a proxy named by the environment (`HTTPS_PROXY`
...), the proxy resolves the name: there the check of the first lookup is what holds. A
request the environment's proxies do not carry (an http:// URL when only `HTTPS_PROXY` is
set, a `NO_PROXY` match) is direct, and pinned (`_pinned.proxy_mounts`).

The body is read up to `MAX_BYTES` decoded bytes, decompressed a bounded step at a time
(`fim.tools.builtin._body`: a few KB of stacked gzip are not a gigabyte in memory), read as
text in a web encoding only (`_body.codec_of`), and masked before it is cut (`clip`): a
page that echoes a secret shows none of it. HTML, and any body over `IN_LOOP_BYTES`, is
read in a killable worker. `TIMEOUT` bounds each network operation and the whole fetch
(every hop and the body): a server sending a byte a second is not waited on for ever.
"""

from __future__ import annotations

import asyncio
import fnmatch
import ipaddress
import socket
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from fim.config.schema import WebFetchSettings
from fim.masking import Masker, known
from fim.tools.base import FunctionTool
from fim.tools.builtin._body import ACCEPT_ENCODING, BodyRefused, codec_of, read_body, text_of
from fim.tools.builtin._common import clip, fail
from fim.tools.builtin._html import page_text
from fim.types import ToolResult

if TYPE_CHECKING:
    from fim.run.services import RunContext

CATEGORY = "web"
MAX_REDIRECTS = 5
DEFAULT_MAX_CHARS = 20_000
MAX_CHARS = 100_000
MAX_BYTES = 5 * 1024 * 1024
TIMEOUT = 20.0
"""Seconds for each network operation, and for the whole fetch: redirects, headers, body."""
IN_LOOP_BYTES = 256 * 1024
"""A plain-text body up to this size is read on the event loop; a larger one (decoding 5 MB
of broken UTF-16 takes most of a second) in the worker, as HTML always is."""
RENDER_TIMEOUT = 5.0
"""Seconds the worker may spend turning a page's HTML into text."""
USER_AGENT = "fim-web-fetch/0.1 (+https://github.com/fim)"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Blocked(Exception):
    """A URL the guard refuses; the message says why and how to allow it."""


def _why_blocked(ip: IPAddress) -> str | None:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for label in ("loopback", "link_local", "unspecified", "multicast", "private", "reserved"):
        if getattr(ip, f"is_{label}"):
            return label.replace("_", "-")
    return None if ip.is_global else "non-public"


_HINT = (
    "Fetch a public URL instead (a project owner can allow this host with "
    "web_fetch.allow_hosts in fim.yaml)"
)


class Guard:
    """Decides, per hop, whether a URL may be fetched. `hint` ends a refusal: what the
    caller can do (web_fetch's names its settings; an HTTP connector's has none)."""

    def __init__(self, settings: WebFetchSettings, hint: str = _HINT) -> None:
        self.allow_private = settings.allow_private
        self.allow_hosts = [h.lower().strip("[]") for h in settings.allow_hosts]
        self.hint = hint

    def host_allowed(self, host: str) -> bool:
        """Matches the host as written in the URL (glob patterns allowed), never the
        addresses it resolves to: allowing `127.0.0.1` does not open `localhost` or a
        public name that happens to resolve to it."""
        return any(fnmatch.fnmatchcase(host, pattern) for pattern in self.allow_hosts)

    async def check(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise Blocked(f"only http and https URLs can be fetched, not '{parts.scheme or url}'")
        host = (parts.hostname or "").lower()
        if not host:
            raise Blocked(f"the URL '{url}' has no host")
        if self.allow_private or self.host_allowed(host):
            return
        await self.addresses(host, parts.port or (443 if parts.scheme == "https" else 80))

    async def addresses(self, host: str, port: int) -> list[IPAddress]:
        """`host` resolved once and checked (raises Blocked). The sandbox's egress proxy
        connects to one of these addresses, not to the name, so no second DNS answer can
        differ (the rebinding gap of `check`)."""
        return self.vetted(host, await self.resolve(host, port))

    def vetted(self, host: str, ips: list[IPAddress]) -> list[IPAddress]:
        """`ips`, the addresses `host` resolved to, when this guard lets them be connected
        to; raises Blocked naming the first it refuses."""
        if self.allow_private or self.host_allowed(host):
            return ips
        for ip in ips:
            reason = _why_blocked(ip)
            if reason is not None:
                raise Blocked(
                    f"'{host}' resolves to {ip} ({reason} address); fetching internal "
                    f"addresses is blocked. {self.hint}"
                )
        return ips

    @classmethod
    async def internal(cls, host: str, port: int) -> bool:
        """Whether `host` resolves to an address the guard refuses by default. An HTTP
        connector whose own host is internal may be redirected to internal hosts (its
        neighbours); one on a public host may not. A host that does not resolve is not."""
        try:
            return cls.inside(await cls.resolve(host, port))
        except Blocked:
            return False

    @staticmethod
    def inside(ips: list[IPAddress]) -> bool:
        """Whether any of `ips` is an address the guard refuses by default."""
        return any(_why_blocked(ip) is not None for ip in ips)

    @staticmethod
    async def resolve(host: str, port: int) -> list[IPAddress]:
        """`host`'s addresses (itself when it is one); raises Blocked when it does not
        resolve."""
        try:
            return [ipaddress.ip_address(host)]
        except ValueError:
            pass
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise Blocked(
                f"cannot resolve host '{host}' ({exc.strerror}); check the URL's spelling"
            ) from None
        return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def _page(
    data: bytes, codec: str, truncated: bool, html: bool, max_chars: int, masker: Masker
) -> str:
    """A fetched body's readable text: decoded, masked before it is cut (the end of a
    download stopped at `MAX_BYTES` is a cut too: a secret may straddle it), HTML reduced
    to text. Module-level: the worker runs it."""
    text = text_of(data, codec)
    if truncated:
        text = masker.edge(text) + f"\n[... download stopped at {MAX_BYTES} bytes]"
    return page_text(text, max_chars, masker) if html else clip(text, max_chars, "page", masker)


async def _render(
    url: str,
    status: int,
    content_type: str,
    body: tuple[bytes, str, bool],
    max_chars: int,
    masker: Masker,
) -> str | ToolResult:
    """The observation of a fetched page (`body`: its bytes, codec and whether the download
    was stopped), masked before it is cut. HTML is read in a killable worker (handed the
    masker): the page is hostile input, and the parser's cost on crafted markup is not
    linear; so is a large body of any type."""
    header = f"URL: {url}\nStatus: {status}\nContent-Type: {content_type or 'unknown'}\n\n"
    html = "html" in content_type
    if not html and len(body[0]) <= IN_LOOP_BYTES:
        return header + _page(*body, False, max_chars, masker)
    # deferred: loading fim.tools.isolate costs a few ms
    from fim.tools import isolate

    text = await isolate.run(
        _page,
        *body,
        html,
        max_chars,
        masker,
        timeout=RENDER_TIMEOUT,
        hint=f"The page at {url} is too costly to read; fetch a plain-text or JSON "
        "version of it, or another page.",
    )
    return text if isinstance(text, ToolResult) else header + text


def make(ctx: RunContext) -> FunctionTool:
    """Build web_fetch with the project's `web_fetch:` settings."""
    guard = Guard(ctx.snapshot.project.web_fetch)

    async def run(url: str, max_chars: int = DEFAULT_MAX_CHARS) -> str | ToolResult:
        import httpx  # lazy: most runs never fetch

        # deferred: with httpx, only when a fetch is made
        from fim.tools.builtin._pinned import pinned_transport, proxy_mounts

        current = url
        try:
            async with (
                asyncio.timeout(TIMEOUT),
                httpx.AsyncClient(
                    timeout=TIMEOUT,
                    follow_redirects=False,
                    headers={"User-Agent": USER_AGENT, "Accept-Encoding": ACCEPT_ENCODING},
                    # a request no proxy of the environment carries connects only to the
                    # addresses the guard vetted; a proxy resolves the name itself
                    transport=pinned_transport(guard.addresses),
                    mounts=proxy_mounts(),
                ) as client,
            ):
                for _ in range(MAX_REDIRECTS + 1):
                    await guard.check(current)
                    async with client.stream("GET", current) as response:
                        if response.is_redirect and "location" in response.headers:
                            current = urljoin(current, response.headers["location"])
                            continue
                        data, truncated = await read_body(response, MAX_BYTES)
                        body = (data, codec_of(response), truncated)
                        status = response.status_code
                        ctype = response.headers.get("content-type", "").split(";")[0].strip()
                        break
                else:
                    return fail(
                        f"more than {MAX_REDIRECTS} redirects starting at {url}. "
                        "Fetch the final URL directly."
                    )
        except Blocked as exc:
            return fail(f"{exc}.")
        except BodyRefused as exc:
            return fail(f"fetching {current}: {exc}. Fetch another URL.")
        except httpx.TimeoutException:
            return fail(f"fetching {current} timed out after {TIMEOUT:g}s. Try again later.")
        except TimeoutError:
            return fail(
                f"fetching {current} timed out after {TIMEOUT:g}s, the limit for a whole "
                "fetch: the server was still sending its answer. Try again later or fetch "
                "a smaller page."
            )
        except httpx.HTTPError as exc:
            return fail(f"fetching {current} failed: {type(exc).__name__}: {exc}.")
        except (httpx.InvalidURL, ValueError) as exc:
            return fail(f"'{current}' is not a valid URL ({exc}). Fix the URL.")
        page = await _render(current, status, ctype, body, max_chars, known())
        if isinstance(page, ToolResult):
            return page
        if status >= 400:
            return ToolResult(
                content=f"Error: the server answered {status}. Check the URL.\n{page}",
                is_error=True,
            )
        return page

    return FunctionTool(
        name="web_fetch",
        description=(
            "Fetch a public web page or JSON/text URL with HTTP GET. Returns its status, "
            "content type and readable text (HTML reduced to text). Private network "
            "addresses are refused; long pages are cut at max_chars."
        ),
        parameters={
            "type": "object",
            "properties": {
                "url": {
                    "type": "string",
                    "pattern": "^[hH][tT][tT][pP][sS]?://",
                    "description": "Absolute http(s) URL, e.g. 'https://example.com/page'.",
                },
                "max_chars": {
                    "type": "integer",
                    "minimum": 100,
                    "maximum": MAX_CHARS,
                    "description": f"Characters of text to return (default {DEFAULT_MAX_CHARS}).",
                },
            },
            "required": ["url"],
            "additionalProperties": False,
        },
        fn=run,
        category=CATEGORY,
        metadata={"builtin": True, "access": "read"},
    )
