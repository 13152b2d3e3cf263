"""Opening a PostgreSQL store gives up after `CONNECT_WITHIN_S` (libpq waits without end by
default): a server that accepts the connection and never answers held `fim serve`'s start
check and every request for good."""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Iterator

import pytest

from fim.store import engine
from fim.store.engine import Database

pytest.importorskip("psycopg")


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections and never says a word (a host dropping
    packets, as far as the client can tell)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def test_a_store_that_never_answers_fails_instead_of_waiting(
    silent_server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "CONNECT_WITHIN_S", 1)
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    db = Database(f"postgresql://fim@127.0.0.1:{silent_server}/fim")
    outcome: queue.Queue[BaseException | None] = queue.Queue()

    def open_it() -> None:
        try:
            db.open()
            outcome.put(None)
        except BaseException as exc:
            outcome.put(exc)

    # a daemon thread: without the bound it would wait for good, and the test must fail
    threading.Thread(target=open_it, daemon=True).start()
    try:
        failed = outcome.get(timeout=60)  # the store gives up long before
    except queue.Empty:
        pytest.fail("opening the store was still waiting")
    assert failed is not None and "timeout" in str(failed)
