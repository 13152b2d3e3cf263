"""`fim mcp serve` logs on stderr one line a record: a hook's stderr or a server's error
text with a model-chosen newline cannot write a second, forged log line (attack-56 F3)."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from fim.commands.mcp import log_to_stderr


def test_a_record_with_newlines_is_one_line_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        log_to_stderr()
        logging.getLogger("fim.hooks").warning("hook 'h' stderr: %s", 'ok\nERROR fim: "forged"')
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    assert err.getvalue().count("\n") == 1
    assert err.getvalue().startswith("WARNING fim.hooks: hook 'h' stderr: ok")
