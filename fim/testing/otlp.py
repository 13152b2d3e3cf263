"""A real OTLP/HTTP trace receiver on loopback, for tests and the tracing benchmark.

It accepts `POST /v1/traces` (protobuf), decodes each request with `opentelemetry-proto`
and keeps the spans, so a test asserts what a collector would receive.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    status: int  # 0 unset, 1 ok, 2 error
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    start_ns: int
    end_ns: int


@dataclass
class Receiver:
    url: str
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0
    count: int = 0
    """Spans received (kept in `spans` too unless the receiver was made with `keep=False`)."""


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _attrs(items: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in items}


@contextmanager
def otlp_receiver(keep: bool = True) -> Iterator[Receiver]:
    """Serve an OTLP/HTTP traces endpoint on 127.0.0.1; yields the receiver (its `url` is
    what OTEL_EXPORTER_OTLP_ENDPOINT takes). With `keep=False` it only counts the spans it
    decodes: a benchmark's receiver shares the cores of the server it measures, and a list
    of every span it was sent made its heap, and its garbage collections, grow for as long
    as the traced server ran (the untraced one had no such neighbour)."""
    # deferred: loading opentelemetry costs tens of ms
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    lock = threading.Lock()
    receiver = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        """Connections kept alive, as a collector keeps them: HTTP/1.0 made the exporter
        connect (and resolve the host) again for every batch."""

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/traces":
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            if not keep:
                got = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
                with lock:
                    receiver.count += got
                    receiver.requests += 1
                self._answer(ExportTraceServiceResponse().SerializeToString())
                return
            spans = [
                ReceivedSpan(
                    name=s.name,
                    trace_id=s.trace_id.hex(),
                    span_id=s.span_id.hex(),
                    parent_id=s.parent_span_id.hex(),
                    kind=s.kind,
                    status=s.status.code,
                    attributes=_attrs(s.attributes),
                    events=[(ev.name, _attrs(ev.attributes)) for ev in s.events],
                    start_ns=s.start_time_unix_nano,
                    end_ns=s.end_time_unix_nano,
                )
                for rs in request.resource_spans
                for ss in rs.scope_spans
                for s in ss.spans
            ]
            with lock:
                receiver.spans.extend(spans)
                receiver.count += len(spans)
                receiver.requests += 1
            self._answer(ExportTraceServiceResponse().SerializeToString())

        def _answer(self, payload: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    # shutdown() waits for the loop to look, every poll_interval (0.5 s by default)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def main() -> None:
    """Serve a receiver in its own process (benchmarks): print its URL, then the number
    of spans received once stdin closes."""

    with otlp_receiver(keep=False) as receiver:
        print(receiver.url, flush=True)
        sys.stdin.read()
        print(receiver.count, flush=True)


if __name__ == "__main__":
    main()
