"""`fim serve --port 0` listens on a port the system chooses and says which, as uvicorn and
every other server do: it served on 8000 instead (`--port 0` read as "not given"), or
failed when 8000 was taken. Scripts and tests start servers side by side this way."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from fim.testing.server import announced_port, fim_process


@pytest.mark.parametrize("workers", [(), ("--workers", "2")], ids=["one", "workers"])
def test_port_zero_is_a_port_the_system_chooses_named_in_the_start_line(
    tmp_path: Path, workers: tuple[str, ...], request: pytest.FixtureRequest
) -> None:
    (tmp_path / "agents").mkdir()
    state = "sqlite:///.fim/state.db"
    if workers:  # processes sharing one store
        state = request.getfixturevalue("pg_database")("").owner_url
    (tmp_path / "fim.yaml").write_text(f'name: zero\nstate: "{state}"\n')
    log = tmp_path / "serve.log"
    args = ("serve", "-p", str(tmp_path), "--port", "0", "--no-reload", *workers)
    with fim_process(*args, log=log) as proc:
        end = time.monotonic() + 60
        while (port := announced_port(log)) is None:
            assert proc.poll() is None and time.monotonic() < end, log.read_text()
            time.sleep(0.05)
        assert port not in (0, 8000)
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
