"""A malformed JSON-RPC request to `/a2a/{agent}` is answered with its JSON-RPC error and
logged as at most one warning line: never a traceback, never an ERROR (attack-50 F2).

The a2a SDK's dispatcher logged the validation's exception (`logger.exception`) for any
such body: a key holder could fill the server's log with ERROR lines and tracebacks, where
ERROR means a fault of the server. `fim.server.a2a_refusals` quiets those records on the
SDK's loggers; the SDK server here is the one fim mounts, on the app `fim serve` runs."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

pytest.importorskip("a2a", reason="a2a-sdk is not installed (pip install 'fim[a2a]')")

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.masking import remember
from fim.server.a2a_refusals import (
    ADAPTER_03,
    DISPATCHER,
    HANDLER,
    QuietRefusals,
    quiet_refusals,
)
from fim.server.app import create_app
from fim.testing.devpage import write_project

JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = write_project(tmp_path_factory.mktemp("a2aquiet"))
    with TestClient(create_app(SnapshotHolder(compile_project(root))), "http://localhost") as c:
        yield c


MALFORMED = [
    ("[1,2]", -32600),  # a batch
    ('{"input": "x"}', -32600),  # fim's native body, sent to A2A
    ("5", -32600),
    ("{}", -32600),
    ('{"jsonrpc": "2.0", "id": 1}', -32600),  # no method
    ('{"jsonrpc": "2.0", "id": 1, "method": 5}', -32600),
    ('{"jsonrpc": "2.0", "id": {"a": 1}, "method": "SendMessage"}', -32600),
    ('{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": 5}', -32600),
    ('{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": [1]}', -32602),
    ('{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": 5}}', -32602),
    ('{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {}}', -32600),  # 0.3
    ('{"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": 5}}', -32600),
]


@pytest.mark.parametrize(("body", "code"), MALFORMED)
def test_a_malformed_request_gets_its_json_rpc_error_and_one_warning_line_at_most(
    client: TestClient, caplog: pytest.LogCaptureFixture, body: str, code: int
):
    with caplog.at_level(logging.DEBUG):
        caplog.clear()
        answer = client.post("/a2a/demo", content=body, headers=JSON)
    assert answer.json()["error"]["code"] == code, answer.text
    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in caplog.records if r.exc_info or r.exc_text], caplog.text
    assert all(r.levelno == logging.WARNING for r in said), caplog.text
    assert len([r for r in said if r.name in (DISPATCHER, ADAPTER_03)]) == 1, caplog.text
    assert "Traceback" not in caplog.text


BIG = 10**12  # no 32-bit field holds it
REFUSED = [  # attack-63 F3: each one logged an ERROR, the first two with a traceback
    ("tasks/get", {"id": "x", "historyLength": BIG}, -32602),
    ("tasks/get", {"id": "x", "historyLength": str(BIG)}, -32602),  # the SDK's lax parse
    ("tasks/get", {"id": "x", "historyLength": float(BIG)}, -32602),
    ("GetTask", {"id": "x", "historyLength": BIG}, -32602),
    ("message/send", {"message": {"role": "user", "messageId": "m", "parts": [
        {"kind": "text", "text": "hi"}]}, "configuration": {"historyLength": BIG}}, -32602),
    ("tasks/pushNotificationConfig/set", {"taskId": "x", "pushNotificationConfig": {
        "url": "http://127.0.0.1:1/"}}, -32003),
    ("tasks/pushNotificationConfig/list", {"id": "x"}, -32003),
    ("tasks/pushNotificationConfig/delete", {"id": "x", "pushNotificationConfigId": "y"}, -32003),
    ("CreateTaskPushNotificationConfig", {"taskId": "x", "url": "http://127.0.0.1:1/"}, -32003),
    ("agent/getAuthenticatedExtendedCard", {}, -32004),
    ("GetExtendedAgentCard", {}, -32004),
]  # fmt: skip


@pytest.mark.parametrize(("method", "params", "code"), REFUSED)
def test_a_request_for_what_the_card_declares_off_or_out_of_range_is_one_warning_at_most(
    client: TestClient, caplog: pytest.LogCaptureFixture, method: str, params: dict, code: int
):
    """An out-of-range `historyLength` is -32602 on every method, as the 1.0 names answered
    it (the 0.3 adapter's conversion raised: -32603 and a traceback); push notifications and
    the extended card, off in every card, are refused with a warning, not an ERROR. A server
    with keys knows secrets, so its log records are made masked, their message formatted."""
    remember(["a-secret-the-quiet-test-knows"])  # as any server with keys
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    version = {} if "/" in method else {"A2A-Version": "1.0"}  # the 1.0 names say so
    with caplog.at_level(logging.DEBUG):
        caplog.clear()
        answer = client.post("/a2a/demo", json=body, headers=version)
    assert answer.json()["error"]["code"] == code, answer.text
    assert not [r for r in caplog.records if r.exc_info or r.exc_text], caplog.text
    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert all(r.levelno == logging.WARNING for r in said) and len(said) <= 1, caplog.text
    if code == -32602:
        assert "historyLength must be between 0 and 2147483647" in answer.text


def test_a_request_with_a_key_twice_is_refused_before_the_sdk_reads_it(
    client: TestClient, caplog: pytest.LogCaptureFixture
):
    """The SDK's parse keeps the last of two values, as fim's bodies once did."""
    body = '{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "method": "GetTask"}'
    with caplog.at_level(logging.DEBUG):
        answer = client.post("/a2a/demo", content=body, headers=JSON)
    assert answer.status_code == 400
    problem = answer.json()["error"]
    assert problem["code"] == -32600 and "'method' twice" in problem["message"]
    assert not [r for r in caplog.records if r.name == DISPATCHER]  # the SDK never saw it


def refusal_record(logger: str, message: str, problem: Exception) -> logging.LogRecord:
    """The record `logging.getLogger(logger).exception(message)` makes for `problem`."""
    try:
        raise problem
    except type(problem):
        return logging.getLogger(logger).makeRecord(
            logger, logging.ERROR, __file__, 1, message, (), sys.exc_info()
        )


def test_a_server_fault_in_the_sdk_still_logs_its_traceback():
    """Only the records of a refused request are quieted: the SDK's `Unhandled exception`
    (a fault of the server, answered -32603) keeps its ERROR and traceback."""
    record = refusal_record(DISPATCHER, "Unhandled exception", RuntimeError("store gone"))
    assert QuietRefusals().filter(record) is True
    assert record.levelno == logging.ERROR and record.exc_info is not None


def test_the_quieted_record_of_the_0_3_adapter_names_the_problem_without_the_clients_text():
    problem = ValueError("client text: \x1b[31mforged\nline")
    message = "Failed to validate base JSON-RPC request for v0.3"
    record = refusal_record(ADAPTER_03, message, problem)
    assert QuietRefusals().filter(record) is True
    assert record.levelno == logging.WARNING and record.levelname == "WARNING"
    assert record.exc_info is None and record.exc_text is None
    assert record.getMessage() == (
        f"A2A request refused: {message} (ValueError); answered with a JSON-RPC error"
    )


def test_the_dispatchers_record_is_dropped_for_the_warning_that_follows_it():
    record = refusal_record(
        DISPATCHER, "Failed to validate base JSON-RPC request", ValueError("Missed fields")
    )
    assert QuietRefusals().filter(record) is False


def test_the_app_installs_the_filter_once(client: TestClient):
    def installed() -> list[int]:
        return [
            sum(isinstance(f, QuietRefusals) for f in logging.getLogger(name).filters)
            for name in (DISPATCHER, ADAPTER_03, HANDLER)
        ]

    client.post("/a2a/demo", content="{}", headers=JSON)  # builds the A2A routes
    assert installed() == [1, 1, 1]
    quiet_refusals()  # again, as a second app in the process does: still one each
    assert installed() == [1, 1, 1]


@pytest.mark.parametrize("formatted", [False, True])
def test_the_handlers_validation_failure_becomes_a_warning_formatted_or_not(formatted: bool):
    """The SDK logs `error("Validation failure: %s", text)`; where fim masks logs the record
    is made with its message already formatted, and is quieted all the same."""
    text = "Push notifications are not supported by the agent"
    msg, args = (
        (f"Validation failure: {text}", ()) if formatted else ("Validation failure: %s", (text,))
    )
    record = logging.getLogger(HANDLER).makeRecord(
        HANDLER, logging.ERROR, __file__, 1, msg, args, None
    )
    assert QuietRefusals().filter(record) is True
    assert record.levelno == logging.WARNING and record.levelname == "WARNING"
    assert record.getMessage() == (
        f"A2A request refused: Validation failure: {text}; answered with a JSON-RPC error"
    )
