"""HTTP connectors: each declared action becomes a tool `{connector}__{action}`.

One pooled `httpx.AsyncClient` per connector declaration lives in `Services`, so runs share
connections and a changed declaration (new token, new base_url) gets a fresh client. The
tool's arguments are split into path, query and JSON body from the action's declaration;
auth comes from the declaration (secrets already interpolated by the loader) and is never
echoed: every observation passes through a mask of the auth values and snapshot secrets,
applied before the observation is cut to `max_response_chars` (a cut that kept all but the
last characters of an echoed key would show them: the model pads a query value to slide it).

This module is the call as the model sees it: an action's arguments in, one observation
out, every failure told as an error observation. Its steps are modules of their own:
`http_tool` (the action's tool, name and hook metadata), `http_request` (arguments to a
request), `http_fetch` (retries, the deadline, redirects, the body read), `http_observation`
(the response rendered, in the loop or a worker) and `http_secrets` (what is masked, what
goes only to the connector's own origin).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

from fim.config.header_text import header_problems
from fim.config.schema import HttpAction, HttpConnector
from fim.config.schema.connector import base_url_problem
from fim.connectors.http_arguments import undeclared
from fim.connectors.http_fetch import Fetcher, Overdue, Refused
from fim.connectors.http_observation import observe
from fim.connectors.http_request import build_request, with_idempotency_key
from fim.connectors.http_secrets import secrets_of
from fim.connectors.http_shown import http_facts, origin
from fim.connectors.http_tool import tool_name
from fim.masking import Masker, known
from fim.tools.builtin._body import BodyRefused
from fim.tools.builtin.web_fetch import Blocked
from fim.types import ToolResult

log = logging.getLogger("fim.connectors")


class HttpConnectorClient:
    """The live side of one HTTP connector declaration."""

    def __init__(
        self, name: str, decl: HttpConnector, mask: Callable[[str], str] | None = None
    ) -> None:
        self.name = name
        self.decl = decl
        self._snapshot_mask = mask or (lambda text: text)
        self._masker = Masker(secrets_of(decl))
        self._bad_headers = header_problems(decl)
        self._cutting: tuple[Masker, Masker] | None = None
        self._fetcher = Fetcher(decl)
        self._refused = False
        """Whether a 401/403 was logged: once per declaration, so once per connector until
        its credentials change (a rotated secret makes a new declaration, and client)."""

    def mask(self, text: str) -> str:
        """The connector's own credentials (in every encoding), then the snapshot's secrets."""
        return self._snapshot_mask(self._masker.text(text))

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
        """The declaration's httpx client (`fim.connectors.http_fetch.Fetcher`)."""
        return self._fetcher.client

    async def aclose(self) -> None:
        await self._fetcher.aclose()

    def build_request(self, action: HttpAction, args: dict[str, Any]) -> dict[str, Any]:
        """Split arguments into path, query and JSON body (`fim.connectors.http_request`);
        raises ValueError when a path parameter is missing or would move the URL."""
        return build_request(action, args)

    async def call(self, action_name: str, args: dict[str, Any]) -> ToolResult:
        action = self.decl.actions[action_name]
        label = tool_name(self.name, action_name)
        bad = base_url_problem(self.decl.base_url)
        if bad is not None:  # no request can be sent: said at once, never retried
            return self._misconfigured(label, f"its base_url {self.decl.base_url!r} {bad}")
        headers = [p for p in self._bad_headers if p[0][0] != "actions" or p[0][1] == action_name]
        if headers:  # the header named, never the value or its character (a credential)
            _, header, why = headers[0]
            return self._misconfigured(label, f"header {header!r}: {why}", "header")
        try:
            request = self.build_request(action, args)
        except ValueError as exc:
            return ToolResult(
                content=f"Error: {label}: {exc}. The path is {action.path}; pass each "
                "parameter in the arguments, as the value the path names.",
                is_error=True,
            )
        refused = self._unsendable(action, args, request)
        if refused is not None:  # nothing was sent: no `http` facts
            return ToolResult(
                content=self.mask(f"Error: {label}: {refused}. Do not retry the same call."),
                is_error=True,
            )
        with_idempotency_key(request, action.method)
        result = await self._send(label, action, request)
        sent = self._sent_url(request)  # what was asked, for whoever debugs the call
        if sent is not None:
            facts = http_facts(action.method, sent, result.metadata.pop("http_status", None))
            result.metadata["http"] = {**facts, "url": self.mask(facts["url"])}
        return result

    def _unsendable(
        self, action: HttpAction, args: dict[str, Any], request: dict[str, Any]
    ) -> str | None:
        """Why the call is not sent: an argument naming a credential or a method override
        (`Fetcher.refuse`), or one the action does not declare (`http_arguments`)."""
        try:
            self._fetcher.refuse(action, request)
        except Refused as exc:
            return str(exc)
        return undeclared(action, args)

    def _sent_url(self, request: dict[str, Any]) -> Any:
        """The URL `request` goes to first (before the credentials are added), or None."""
        try:
            return self._fetcher.outgoing(request).url
        except Exception:  # a request that could not be built was never sent
            return None

    async def _send(self, label: str, action: HttpAction, request: dict[str, Any]) -> ToolResult:
        """The observation of sending `request`; its metadata's `http_status` is the
        response's status (absent: no response came)."""
        # deferred: loading httpx costs tens of ms
        import httpx

        try:
            fetched = await self._fetcher.fetch(action, request)
        except httpx.TimeoutException:
            return ToolResult(
                content=f"Error: {label} timed out after {self.decl.timeout:g}s. The "
                "service is slow or down; try again later or ask for less data.",
                is_error=True,
            )
        except Overdue:
            return ToolResult(
                content=f"Error: {label} timed out after {self.decl.timeout:g}s, the "
                f"connector's timeout for a whole request: {self.name} was still sending "
                "its response. Try again later or ask for less data.",
                is_error=True,
            )
        except httpx.UnsupportedProtocol as exc:  # a URL no retry can send to
            return self._misconfigured(label, f"the request URL is not an http(s) URL ({exc})")
        except httpx.TransportError as exc:
            return ToolResult(
                content=self.mask(
                    f"Error: {label} could not reach {self.name} at {self._origin()} "
                    f"({type(exc).__name__}: {exc}). The service may be down."
                ),
                is_error=True,
            )
        except (Blocked, BodyRefused, Refused) as exc:
            return ToolResult(
                content=self.mask(f"Error: {label}: {exc}. Do not retry the same call."),
                is_error=True,
            )
        except httpx.InvalidURL as exc:
            return ToolResult(
                content=self.mask(f"Error: {label}: the service redirected to a bad URL ({exc})."),
                is_error=True,
            )
        except UnicodeError:  # its text names a character of a header, a credential's
            return self._misconfigured(label, "a header is not text HTTP can carry", "header")
        if fetched.status in (401, 403) and not self._refused:
            self._refused = True  # the operator's to fix: the model only reads the error
            log.warning(
                "connector '%s' answered HTTP %d %s to %s: its credentials were refused "
                "(a rotated or wrong secret?); fim reads them again at the next reload or "
                "restart (said once until they change)",
                self.name, fetched.status, self.mask(fetched.reason), label,
            )  # fmt: skip
        masker = self._cut_masker()
        seen = await observe(self.name, fetched, self.decl.max_response_chars, masker, self.mask)
        seen.metadata["http_status"] = fetched.status
        return seen

    def _origin(self) -> str:
        """The scheme, host and port the connector's calls go to (`http://127.0.0.1:8081`):
        an unset `${STATUS_API_URL}` whose default applied shows at once (newcomer-53 #10)."""
        return self.mask(origin(self.client.base_url))

    def _misconfigured(self, label: str, why: str, what: str = "base_url") -> ToolResult:
        """A call the connector's configuration makes impossible: said as a configuration
        error, not an outage (an empty `base_url` read as "the service may be down")."""
        return ToolResult(
            content=self.mask(
                f"Error: {label}: connector '{self.name}' is misconfigured: {why}. This is "
                "a configuration error, not the service being down: do not retry; the "
                f"connector's {what} (or the variable it reads) must be fixed, and `fim "
                "validate` shows where."
            ),
            is_error=True,
        )


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


__all__ = ["HttpConnectorClient", "get_client"]
