"""Where the spans of a traced process go: the exporters `OTEL_TRACES_EXPORTER` names
(`otlp`, the default, `console`, `none`), the resource they are exported under, and how
long the last export of a process may take. `fim.observe.sdk` builds the provider from
them. Imported only when tracing is on.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from fim.errors import RunError

EXIT_TIMEOUT_S = 2.0
"""How long the last export of a process may take, unless `OTEL_EXPORTER_OTLP_TIMEOUT`
(or its traces variant) says otherwise: a one-shot command's spans go out at its exit,
and a collector that is not there must not hold the command up."""


def exit_timeout() -> float | None:
    """`EXIT_TIMEOUT_S`, or None when the standard variable sets the export timeout."""
    env = os.environ
    if env.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") or env.get("OTEL_EXPORTER_OTLP_TIMEOUT"):
        return None
    return EXIT_TIMEOUT_S


EXPORTERS = ("otlp", "console", "none")
"""The values of `OTEL_TRACES_EXPORTER` fim knows (the SDK's names)."""


def exporter_names() -> list[str]:
    """`OTEL_TRACES_EXPORTER` as a list (default `otlp`), `none` dropped."""
    raw = os.environ.get("OTEL_TRACES_EXPORTER", "") or "otlp"
    names = [part.strip().lower() for part in raw.split(",") if part.strip()]
    return [name for name in dict.fromkeys(names) if name != "none"]


def exporters() -> list[Any]:
    """The exporters `OTEL_TRACES_EXPORTER` names, made."""
    made = []
    for name in exporter_names():
        if name == "console":
            # deferred: loading opentelemetry's SDK costs tens of ms
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            # stderr, not the SDK's stdout: stdout is `fim run`'s answer (or its JSON)
            made.append(ConsoleSpanExporter(out=sys.stderr))
        elif name == "otlp":
            made.append(otlp_exporter())
    return made


def resource() -> Any:
    """The SDK's own `Resource.create` (service name: `OTEL_SERVICE_NAME`, else the
    project's `name:` (`fim.observe.name_service`), else `fim`; `OTEL_RESOURCE_ATTRIBUTES`,
    SDK attributes), with its hash computed once.

    The OTLP encoder groups every exported span by resource, and `Resource.__hash__`
    JSON-dumps the attributes on each call: ~5 us a span, a sixth of the encoder's work.
    A resource is immutable, so the hash never changes."""
    # deferred: loading opentelemetry costs tens of ms
    from opentelemetry.sdk.resources import Resource

    class _HashedOnce(Resource):
        def __init__(self, attributes: Any, schema_url: str | None = None) -> None:
            super().__init__(attributes, schema_url)
            self._hash = super().__hash__()

        def __hash__(self) -> int:
            return self._hash

    # deferred: read when the provider is made, after the project named itself
    from fim.observe.context import service_name

    name = os.environ.get("OTEL_SERVICE_NAME") or service_name or "fim"
    made = Resource.create({"service.name": name})
    return _HashedOnce(made.attributes, made.schema_url)


def otlp_exporter() -> Any:
    """The OTLP exporter `OTEL_EXPORTER_OTLP_PROTOCOL` asks for (fim's OTLP/HTTP one by
    default, the upstream gRPC one for `grpc`)."""
    env = os.environ
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol == "grpc":
        try:
            # deferred: optional dependency, absent in some installs
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise RunError(  # not ConfigError: that has no `hint` (it raised TypeError)
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc",
                hint="pip install -e '.[otel]' in fim's checkout, or use http/protobuf",
            ) from exc
        return OTLPSpanExporter()
    try:
        # deferred: loading opentelemetry costs tens of ms
        from fim.observe.otlp_fast import FastOTLPSpanExporter
    except ImportError:  # an SDK older than the exporter internals the subclass reuses
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    return FastOTLPSpanExporter.create()
