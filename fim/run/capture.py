"""Whether a run keeps what its model calls sent and got back on their `llm_call` events
(`fim.engines.call_content`; newcomer-53 #2).

`observability.capture_content` in fim.yaml decides when it is set. Unset, content is kept
when `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` is true (the OpenTelemetry
variable asks for it) and for the developer's own runs (`Services.local`: `fim run`, a
`fim serve` on loopback), not for a server others reach, nor the jobs a `fim worker`
runs for one (attack-61 F2: a `Services` is not local unless its surface says so). Trace
spans carry the content only when that variable is true and the run keeps it (README): a
trace backend may be shared, the state store is the project's own. The decision is made
once per run (`RunPlan.capture`) and given to its engine and its span writer, so
`capture_content: false` keeps content out of every span (attack-62 F1).
"""

from __future__ import annotations

import os
from typing import Any

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The variable `fim.observe.sdk` reads for spans (named here: that module loads OTel)."""


def env_capture() -> bool:
    """Whether the OpenTelemetry variable asks for message content."""
    return os.environ.get(CAPTURE_ENV, "").strip().lower() in ("1", "true", "yes")


def capture_content(project: Any, services: Any) -> bool:
    """Whether runs of `project` served by `services` keep their model calls' content."""
    configured = getattr(getattr(project, "observability", None), "capture_content", None)
    if configured is not None:
        return bool(configured)
    return env_capture() or bool(getattr(services, "local", False))


__all__ = ["CAPTURE_ENV", "capture_content", "env_capture"]
