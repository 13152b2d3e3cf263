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
from collections.abc import Callable
from typing import Any

from fim.config.schema import HttpAction, HttpConnector
from fim.config.schema.connector import base_url_problem
from fim.connectors.http_fetch import Fetcher, Overdue, Refused
from fim.connectors.http_observation import observe
from fim.connectors.http_request import build_request, with_idempotency_key
from fim.connectors.http_secrets import secrets_of
from fim.connectors.http_tool import tool_name
from fim.masking import Masker, known
from fim.tools.builtin._body import BodyRefused
from fim.tools.builtin.web_fetch import Blocked
from fim.types import ToolResult


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
        self._fetcher = Fetcher(decl)

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
        # deferred: loading click costs tens of ms
        import httpx

        action = self.decl.actions[action_name]
        label = tool_name(self.name, action_name)
        bad = base_url_problem(self.decl.base_url)
        if bad is not None:  # no request can be sent: said at once, never retried
            return self._misconfigured(label, f"its base_url {self.decl.base_url!r} {bad}")
        try:
            request = self.build_request(action, args)
        except ValueError as exc:
            return ToolResult(
                content=f"Error: {label}: {exc}. The path is {action.path}; pass each "
                "parameter in the arguments, as the value the path names.",
                is_error=True,
            )
        with_idempotency_key(request, action.method)
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
                    f"Error: {label} could not reach {self.name} "
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
        masker = self._cut_masker()
        return await observe(self.name, fetched, self.decl.max_response_chars, masker, self.mask)

    def _misconfigured(self, label: str, why: str) -> ToolResult:
        """A call the connector's configuration makes impossible: said as a configuration
        error, not an outage (an empty `base_url` read as "the service may be down")."""
        return ToolResult(
            content=self.mask(
                f"Error: {label}: connector '{self.name}' is misconfigured: {why}. This is "
                "a configuration error, not the service being down: do not retry; the "
                "connector's base_url (or the variable it reads) must be fixed, and `fim "
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
