"""A run's trace as a link into the trace backend (newcomer-53 #9).

`FIM_TRACE_URL` (else `observability.trace_url:` in fim.yaml) is the page of one trace in
your backend, `{trace_id}` standing for the trace's 32 hex digits:
`http://localhost:16686/trace/{trace_id}` for Jaeger. `GET /v1/runs/{id}` then carries the
run's `trace_url` in its `data`, and the dev page links the run's trace id to it. A password
or credential query value in either form is a secret (`fim.masking.config_secrets`), masked
at every exit: the link is served to every API key.
"""

from __future__ import annotations

import os
import re
from typing import Any

from fim.masking import config_secrets, remember

TRACE_URL_ENV = "FIM_TRACE_URL"
PLACEHOLDER = "{trace_id}"
_TRACE_ID = re.compile(r"[0-9a-f]{32}")


def trace_template(project: Any) -> str | None:
    """The link template in force: `FIM_TRACE_URL`, else fim.yaml's
    `observability.trace_url`; None when neither is set (or the variable is empty)."""
    raw = os.environ.get(TRACE_URL_ENV)
    if raw is not None:  # a secret as fim.yaml's is: its password, a `?token=` (attack-65 F3)
        remember(config_secrets(raw))
    else:
        settings = getattr(project, "observability", None)
        raw = getattr(settings, "trace_url", None)
    return (raw or "").strip() or None


def trace_link(template: str | None, trace_id: object) -> str | None:
    """The trace's page: `template` with the trace id in it, or None without a template,
    an http(s) one or a trace id (32 lowercase hex digits, nothing else goes in a link)."""
    if not template or not isinstance(trace_id, str) or not _TRACE_ID.fullmatch(trace_id):
        return None
    if not template.lower().startswith(("http://", "https://")):
        return None
    return template.replace(PLACEHOLDER, trace_id)


def run_trace_link(template: str | None, events: list[dict[str, Any]]) -> str | None:
    """The link of the trace a run's events name (its `run_started`'s `trace_id`)."""
    if not template:
        return None
    found = next((e.get("trace_id") for e in events if e.get("trace_id")), None)
    return trace_link(template, found)
