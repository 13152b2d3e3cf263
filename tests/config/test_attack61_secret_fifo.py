"""Attack 61, finding 4: a secret file that is not a regular file must not hang fim.

`${file:/path}` and `VAR_FILE` were read with a plain `open()`, and opening a FIFO for
reading blocks until a writer comes: a FIFO (or `/dev/tty`) named there hung `fim
validate` until CI's timeout and froze hot reload for good, even for the commit that
removed the reference. Now the file is opened without blocking and only a regular file is
read; anything else (a FIFO, a directory, a device) is a secret file that cannot be read:
the connector is unavailable, the problem names the file and says why, and the command
returns at once. A link to a regular file (a Kubernetes Secret volume is made of links)
is still followed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from fim.config.interpolate import interpolate
from fim.config.yamlio import parse

T = TypeVar("T")

CONNECTOR = (
    "kind: http\n"
    "base_url: http://127.0.0.1:9\n"
    "auth: {{type: bearer, token: {token}}}\n"
    "actions:\n"
    "  get_status: {{path: /status}}\n"
)


def unhung(fifo: Path, call: Callable[[], T]) -> T:
    """`call()`, failing the test instead of hanging it if it blocks on opening `fifo`:
    after a generous wait a writer opens the FIFO, which releases the blocked reader."""
    found: list[T] = []
    worker = threading.Thread(target=lambda: found.append(call()), daemon=True)
    worker.start()
    worker.join(30)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # let the blocked open go
        worker.join()
        pytest.fail(f"reading the secret file blocked on the FIFO {fifo}")
    return found[0]


def expand(text: str, env: dict[str, str]) -> tuple[object, set[str], list[str]]:
    doc = parse(text, "connectors/status.yaml")
    secrets: set[str] = set()
    interpolate(doc, secrets, env)
    return doc.data, secrets, [p.message for _, p in doc.unset]


@pytest.mark.parametrize("form", ["file", "VAR_FILE"])
def test_a_fifo_is_a_secret_file_that_cannot_be_read(tmp_path: Path, form: str) -> None:
    fifo = tmp_path / "token_fifo"
    os.mkfifo(fifo)
    text = f'token: "${{file:{fifo}}}"\n' if form == "file" else 'token: "${TOK}"\n'
    env = {} if form == "file" else {"TOK_FILE": str(fifo)}
    data, secrets, unset = unhung(fifo, lambda: expand(text, env))
    assert data == {"token": ""} and secrets == set()
    assert len(unset) == 1
    assert f"'{fifo}', which cannot be read (not a regular file)" in unset[0]


def test_a_directory_is_not_a_secret_file(tmp_path: Path) -> None:
    _, _, unset = expand(f'token: "${{file:{tmp_path}}}"\n', {})
    assert unset == [f"secret file '{tmp_path}', which cannot be read (not a regular file)"]


def test_a_link_to_a_regular_file_is_still_read(tmp_path: Path) -> None:
    """As a Kubernetes Secret volume: `token -> ..data/token`, `..data -> ..2026_12_03`."""
    versioned = tmp_path / "..2026_12_03"
    versioned.mkdir()
    (versioned / "token").write_text("tok-linked\n")
    (tmp_path / "..data").symlink_to(versioned.name)
    (tmp_path / "token").symlink_to("..data/token")
    data, secrets, unset = expand(f'token: "${{file:{tmp_path / "token"}}}"\n', {})
    assert data == {"token": "tok-linked"} and secrets == {"tok-linked"} and unset == []


def test_fim_validate_returns_at_once_naming_the_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "token_fifo"
    os.mkfifo(fifo)
    root = tmp_path / "ops"
    (root / "connectors").mkdir(parents=True)
    (root / "fim.yaml").write_text("name: ops\n")
    token = f'"${{file:{fifo}}}"'
    (root / "connectors" / "status.yaml").write_text(CONNECTOR.format(token=token))
    try:  # a subprocess: a hang must fail this test, not the test process
        done = subprocess.run(
            [sys.executable, "-m", "fim.cli", "validate", "-p", str(root)],
            capture_output=True,
            text=True,
            timeout=90,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("fim validate hung on a FIFO named as a secret file")
    assert done.returncode == 0, done.stderr
    assert "1 unavailable" in done.stdout
    assert done.stderr.startswith("connectors/status.yaml:3:")
    assert (
        f"connector 'status' is unavailable: secret file '{fifo}', which cannot be read "
        "(not a regular file)" in done.stderr
    )
    assert "Traceback" not in done.stderr
