"""Attack 65 F3: `FIM_TRACE_URL` is masked as `observability.trace_url:` in fim.yaml is.

The link of a run's trace is served to every API key (`GET /v1/runs/{id}`, the dev page).
fim.yaml's template had its password registered as a secret by the loader; the variable's
did not, so `http://admin:<password>@grafana/...` went out whole. Now the variable's
userinfo password and credential query values are secrets too, masked at every exit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fim.masking import known
from fim.observe.trace_links import trace_template
from tests.observe.test_newcomer53_page_traces import _run_record, _trace_id, project

PASSWORD = "GrafPw-a65-777"
TOKEN = "grafTok-a65-8812"
TEMPLATE = f"http://admin:{PASSWORD}@127.0.0.1:31206/trace/{{trace_id}}?auth_token={TOKEN}"


def test_the_variables_password_and_query_token_are_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FIM_TRACE_URL", TEMPLATE)
    assert trace_template(None) == TEMPLATE  # the template itself is unchanged
    shown = known().text(TEMPLATE)
    assert PASSWORD not in shown and TOKEN not in shown
    assert shown.startswith("http://admin:***@127.0.0.1:31206/trace/")


def test_a_runs_trace_url_from_the_variable_is_served_masked(
    tmp_path: Path, receiver: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its own password and token: the process-wide secrets never shrink, so the test
    above must not have taught them."""
    password, token = "GrafPw-a65-served", "grafTok-a65-served"
    monkeypatch.setenv("FIM_TRACE_URL", TEMPLATE.replace(PASSWORD, password).replace(TOKEN, token))
    record = _run_record(project(tmp_path))
    trace = _trace_id(record)
    assert record["data"]["trace_url"] == (
        f"http://admin:***@127.0.0.1:31206/trace/{trace}?auth_token=***"
    )
    assert password not in json.dumps(record) and token not in json.dumps(record)
