"""The OTLP writers a traced run's spans use when they are queued serialized
(`fim.observe.sdk.Sink.direct`): imported by the first such run, as `Sink` imports the
rest of the encoder (`fim.observe.run_spans` stays importable without it)."""

from __future__ import annotations

from typing import Any

_writers: tuple[Any, ...] = ()


def writers() -> tuple[Any, ...]:
    """`otlp_attributes.number`, `otlp_spans.framed_root`, `child_prefix`, `queue_child`."""
    global _writers
    if not _writers:
        # deferred: the OTLP encoder's modules load with the exporter that uses them
        from fim.observe.otlp_attributes import number
        from fim.observe.otlp_spans import child_prefix, framed_root, queue_child

        _writers = (number, framed_root, child_prefix, queue_child)
    return _writers
