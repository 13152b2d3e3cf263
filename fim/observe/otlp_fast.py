"""The upstream OTLP/HTTP span exporter with a cheaper span -> protobuf encoding.

The request is written as bytes (`encode_request`): spans serialized once
(`fim.observe.otlp_spans`), grouped by resource and scope as the upstream encoder groups
them, and framed; fim's own spans arrive serialized already and are only joined.
Everything else -- endpoint, headers, compression, retries, timeouts, the request size
limit, the exporter's own metrics -- is the upstream exporter's.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http._common import (
    RequestPayloadTooLargeError,
    _is_request_too_large,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from fim.observe.otlp_attributes import add_attributes
from fim.observe.otlp_spans import encode_readable, field

_logger = logging.getLogger(__name__)
_said = logging.getLogger("fim.observe")
_UPSTREAM = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
"""The logger the upstream exporter's HTTP client writes its retries and failures to."""


class _NoRetryLines(logging.Filter):
    """Drops the upstream client's lines about one export (`Transient error ... retrying
    in 0.88s`, `Failed to export span batch ...`, `Shutdown in progress`): a collector
    that is not there wrote four lines of urllib3 text per batch.
    `FastOTLPSpanExporter.export` says it in one line instead."""

    PREFIXES = ("Transient error", "Failed to export", "Shutdown in progress")

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(self.PREFIXES))


_QUIET = _NoRetryLines()


_HEADS: dict[tuple[str, int], tuple[Any, bytes]] = {}
"""("resource" | "scope", id) -> (the object, its serialized head): the non-repeated
fields of a `ResourceSpans` (resource, schema URL) or `ScopeSpans` (scope, schema URL),
built once per resource and scope (a process has one of each, held by `_HEADS`)."""


def _head(kind: str, of: Any) -> bytes:
    key = (kind, id(of))
    found = _HEADS.get(key)
    if found is not None and found[0] is of:
        return found[1]
    if kind == "resource":
        resource_spans = ResourceSpans()
        resource_spans.resource.SetInParent()
        add_attributes(resource_spans.resource.attributes, of.attributes)
        if of.schema_url:
            resource_spans.schema_url = of.schema_url
        head = resource_spans.SerializePartialToString()
    else:
        scope_spans = ScopeSpans()
        scope_spans.scope.SetInParent()
        if of is not None:
            scope_spans.scope.name = of.name
            if of.version:
                scope_spans.scope.version = of.version
            add_attributes(scope_spans.scope.attributes, of.attributes)
            if of.schema_url:
                scope_spans.schema_url = of.schema_url
        head = scope_spans.SerializePartialToString()
    if len(_HEADS) >= 64:  # resources and scopes made per batch (tests): stay bounded
        _HEADS.clear()
    _HEADS[key] = (of, head)
    return head


Home = tuple[Any, Any]
"""The resource and instrumentation scope of the spans queued as bytes."""


def encode_request(spans: Iterable[ReadableSpan | bytes], home: Home | None = None) -> bytes:
    """The serialized request the upstream `encode_spans` makes: spans grouped by
    resource, then by instrumentation scope, each group in the order it first appears.
    A span may come already serialized (`framed_span`): it belongs to `home`.

    Written as bytes, not built as a message: every message of an OTLP request is a
    length-delimited field of its parent, so each span is serialized once (`_span`) and
    framed, and its cached attribute bytes are never parsed into a message tree to be
    serialized again (the tree of a 512-span batch cost more than encoding it)."""
    if home is not None and type(spans) is list:
        try:  # the usual batch: fim's own spans only, each serialized and framed
            joined = b"".join(spans)
        except TypeError:  # a `ReadableSpan` among them
            pass
        else:
            if not joined:
                return b""
            scoped = field(b"\x12", _head("scope", home[1]) + joined)
            return field(b"\x0a", _head("resource", home[0]) + scoped)
    groups: dict[Any, dict[Any, list[bytes]]] = {}
    resource = scope = members = None
    for span in spans:
        if type(span) is bytes:
            owner, owner_scope = home or (None, None)
        else:
            owner, owner_scope = span.resource, span.instrumentation_scope  # type: ignore[union-attr]
        # a batch is mostly one resource and scope: `is` spares their hashes (the SDK's
        # `Resource.__hash__` JSON-dumps the attributes); equal ones still share a group
        if owner is not resource or owner_scope is not scope:
            resource, scope = owner, owner_scope
            scopes = groups.setdefault(resource, {})
            members = scopes.setdefault(scope or None, [])
        members.append(  # type: ignore[union-attr]
            span if type(span) is bytes else field(b"\x12", encode_readable(span))  # type: ignore[arg-type]
        )
    request = []
    for resource, scopes in groups.items():
        body = [_head("resource", resource)]
        for scope, members in scopes.items():
            body.append(field(b"\x12", _head("scope", scope) + b"".join(members)))
        request.append(field(b"\x0a", b"".join(body)))
    return b"".join(request)


class FastOTLPSpanExporter(OTLPSpanExporter):
    """`OTLPSpanExporter` whose `export` encodes with `encode_spans` above; the rest of
    the method is the upstream one (size limit, transport, the exporter's metrics)."""

    _REUSED = ("_shutdown", "_metrics", "_max_request_size", "_client")

    home: Home | None = None
    """Where the spans queued as bytes belong (set by `fim.observe.sdk.provider`)."""
    failing = False
    """The last export failed (its line is written once, until one succeeds again)."""
    final = False
    """The process is ending (`finishing`): after a failure, later batches are dropped."""

    @classmethod
    def create(cls) -> OTLPSpanExporter:
        """This exporter, or the upstream one when its internals that `export` reuses are
        not there (another SDK version): the fast path is never a broken one."""
        transport = light_transport()
        made = cls() if transport is None else cls(_transport=transport)
        if all(hasattr(made, name) for name in cls._REUSED):
            logging.getLogger(_UPSTREAM).addFilter(_QUIET)  # once: a filter is a set member
            return made
        made.shutdown()  # type: ignore[no-untyped-call]
        return OTLPSpanExporter()

    def finishing(self, timeout: float | None) -> None:
        """The process is exiting: the last export is tried once (no retry waits), within
        `timeout` seconds (None: the configured export timeout), and a failure drops the
        batches after it (`fim.observe.sdk._at_exit`)."""
        self.final = True
        client = self._client
        event = getattr(client, "_shutdown_event", None)
        if event is not None:
            event.set()  # the upstream client stops retrying when it is set
        if timeout is not None and getattr(client, "_timeout", 0) > timeout:
            client._timeout = timeout

    def _failed(self, count: int, reason: object) -> None:
        """One line per outage, naming the endpoint (no retry lines: `_NoRetryLines`)."""
        if not self.failing:
            self.failing = True
            _said.warning(
                "traces: could not export %d span(s) to %s (%s); is the collector running?"
                " (later failures are not logged until an export succeeds)",
                count,
                self._endpoint,
                _short(reason),
            )

    def export(self, spans: Sequence[ReadableSpan | bytes]) -> SpanExportResult:
        if self.final and self.failing:  # exiting, the collector unreachable: not again
            return SpanExportResult.FAILURE
        if self._shutdown:
            _logger.warning("Exporter already shutdown, ignoring batch")
            return SpanExportResult.FAILURE
        with self._metrics.export_operation(len(spans)) as result:
            try:
                data = encode_request(spans, self.home)
            except Exception as error:
                _logger.error("Failed to encode span batch: %s", error)
                result.error = error
                return SpanExportResult.FAILURE
            if _is_request_too_large(data, self._max_request_size):
                _logger.warning("Dropping span batch: %d bytes exceeds the limit", len(data))
                result.error = RequestPayloadTooLargeError(f"{len(data)} bytes")
                return SpanExportResult.FAILURE
            sent = self._client.export(data)
            if not sent.success:
                result.error = sent.error
                if sent.status_code is not None:
                    result.error_attrs = {"http.response.status_code": sent.status_code}
                self._failed(
                    len(spans),
                    f"HTTP {sent.status_code}" if sent.status_code else sent.error or "no answer",
                )
                return SpanExportResult.FAILURE
        self.failing = False
        return SpanExportResult.SUCCESS


_REQUESTS_ONLY = (
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER",
)
"""A credential provider's session: only the upstream default transport (requests)
takes one."""


def _proxied() -> bool:
    """Whether requests would use a proxy: it reads them with urllib's own `getproxies()`
    (any `*_proxy` variable, whatever its case; the OS settings on macOS and Windows), so
    this asks the same function rather than a list of names."""
    # deferred: urllib.request is loaded with requests, only when tracing is on
    from urllib.request import getproxies

    return any(scheme != "no" and url for scheme, url in getproxies().items())


def light_transport() -> Any:
    """The upstream urllib3 transport in place of its default, requests, unless something
    only requests does is configured (a proxy, a credential provider, a netrc file, a CA
    folder): requests merges
    proxy, netrc and environment settings into every POST, which more than doubled an
    export's CPU (a batch every few runs under load). The certificates are the ones the
    upstream reads from the `OTEL_EXPORTER_OTLP_*CERTIFICATE`/`*CLIENT_KEY` variables (its
    own reader, asked here), and with none set the CA bundle requests would use:
    `REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE`, else certifi's. None, and the upstream default,
    when this SDK has no urllib3 transport."""
    if any(os.environ.get(name) for name in _REQUESTS_ONLY) or _netrc() or _proxied():
        return None
    try:
        # deferred: loaded with the exporter; absent from SDKs before 1.45
        from opentelemetry.exporter.http.transport._urllib3 import Urllib3HTTPTransport
        from opentelemetry.exporter.otlp.proto.http import _common as upstream
        from opentelemetry.sdk import environment_variables as names

        configured = upstream._build_transport(
            None, None, None,
            names.OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE,
            names.OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY,
            names.OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE,
            session=None,
        )  # fmt: skip
        session = configured._session  # type: ignore[attr-defined]
        verify, cert = session.verify, session.cert
        configured.close()
        if verify is True:
            # deferred: requests' own CA bundle, loaded with it
            import certifi

            env = os.environ
            verify = env.get("REQUESTS_CA_BUNDLE") or env.get("CURL_CA_BUNDLE") or certifi.where()
        if isinstance(verify, str) and os.path.isdir(verify):
            return None  # a folder of CAs: requests reads it as one, the transport would not
        return Urllib3HTTPTransport(verify=verify, cert=cert)
    except (ImportError, AttributeError, TypeError):
        return None


def _netrc() -> bool:
    """Whether requests would read a netrc file for the collector's credentials."""
    named = os.environ.get("NETRC")
    if named:
        return os.path.exists(named)
    home = os.path.expanduser("~")
    return any(os.path.exists(os.path.join(home, name)) for name in (".netrc", "_netrc"))


def _short(reason: object) -> str:
    """An export error in a few words: urllib3's text of a refused connection is three
    nested exceptions on one line."""
    text = str(reason)
    if "Connection refused" in text or "NewConnectionError" in text:
        return "connection refused"
    if "timed out" in text.lower() or "Timeout" in text:
        return "timed out"
    return text[:120]
