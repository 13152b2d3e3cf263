"""Newcomer 50, finding 10: `python -m fim.testing.model_server --port N` serves at a fixed
address, so a model's `api_base` and the cassettes recorded against it (keyed on it) stay
the same when the stub is restarted; a port already taken is one line, no traceback."""

from __future__ import annotations

import socket
import subprocess
import sys

import httpx
import pytest

from fim.testing.model_server import OpenAIStubServer, main


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_once(port: int) -> str:
    """Start the stub as the README's recipe does, ask it once, stop it by its pid."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fim.testing.model_server", "--port", str(port), "--answer", "ok"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        base_url = proc.stdout.readline().strip()
        body = {"model": "stub", "messages": [{"role": "user", "content": "hi"}]}
        reply = httpx.post(f"{base_url}/chat/completions", json=body, timeout=5).json()
        assert reply["choices"][0]["message"]["content"] == "ok"
        return base_url
    finally:
        proc.terminate()
        assert proc.wait(timeout=5) == 0


def test_a_restarted_stub_keeps_its_base_url() -> None:
    port = free_port()
    first = serve_once(port)
    assert first == f"http://127.0.0.1:{port}/v1"
    assert serve_once(port) == first


def test_the_server_class_takes_host_and_port() -> None:
    port = free_port()
    with OpenAIStubServer(host="127.0.0.1", port=port) as server:
        assert server.base_url == f"http://127.0.0.1:{port}/v1"
    with OpenAIStubServer(host="0.0.0.0", port=port) as everywhere:  # reached at loopback
        assert everywhere.base_url == f"http://127.0.0.1:{port}/v1"


def test_a_taken_port_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with OpenAIStubServer() as holder, pytest.raises(SystemExit) as exited:
        main(["--port", str(holder.port)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot listen on 127.0.0.1:{holder.port}: ")
    assert err.endswith("(stop the server holding it, or pick another --port)\n")
    assert "Traceback" not in err and len(err.splitlines()) == 1
