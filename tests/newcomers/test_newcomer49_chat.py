"""Newcomer 49's item 10: an interactive chat (`fim run AGENT` at a terminal, no prompt) is
kept as a session, `/help` names it, and leaving says how to continue it; `--session NAME`
says it continues that session and with how many messages. Real processes on a real
terminal (a pty): the chat starts only when stdin is one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

pty = pytest.importorskip("pty")  # POSIX only


def chat(root: Path, lines: list[str], *args: str) -> tuple[int, str]:
    """`fim run assistant ARGS` with its stdin on a terminal where `lines` were typed;
    (exit code, stderr)."""
    leader, follower = pty.openpty()
    try:
        os.write(leader, "".join(line + "\n" for line in lines).encode())
        done = subprocess.run(
            [sys.executable, "-m", "fim.cli", "run", "assistant", *args],
            cwd=root,
            stdin=follower,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        os.close(follower)
        os.close(leader)
    return done.returncode, done.stderr


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "agents").mkdir()
    (tmp_path / "fim.yaml").write_text("name: p\nstate: sqlite:///.fim/state.db\n")
    (tmp_path / "s.yaml").write_text('- text: "hello back"\n')
    (tmp_path / "agents" / "assistant.yaml").write_text("description: a\nmodel: scripted:s.yaml\n")
    return tmp_path


def test_a_chat_is_kept_as_a_session_that_can_be_continued(root: Path) -> None:
    code, err = chat(root, ["hello", "/help", "/exit"])
    assert code == 0, err
    name = re.search(r"\(session (chat-assistant-\d{4})\)", err.splitlines()[0])
    assert name, err
    session = name.group(1)
    assert f"session: {session} (continue it later: fim run assistant --session {session})" in err
    assert "/session this chat's session" in err  # /help lists it
    assert err.endswith(f"continue with: fim run assistant --session {session}\n")

    code, err = chat(root, ["and again", "/exit"], "--session", session)
    assert code == 0, err
    assert err.startswith(f"Continuing session {session} (2 messages) with assistant.")
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    shown = CliRunner().invoke(app, ["sessions", "show", session, "-p", str(root)])
    assert shown.stdout.splitlines()[1:] == [
        "user: hello",
        "assistant: hello back",
        "user: and again",
        "assistant: hello back",
    ]

    code, err = chat(root, ["hi", "/exit"])  # a new chat, the same minute or not
    started = re.search(r"\(session (chat-assistant-[\d-]+)\)", err)
    assert started and started.group(1) != session, err  # never the first one continued


def test_a_named_session_that_is_new_says_so_and_an_empty_chat_keeps_nothing(
    root: Path,
) -> None:
    code, err = chat(root, ["/exit"], "--session", "dinner")
    assert code == 0
    assert err.startswith("Chatting with assistant in new session dinner.")
    assert "continue with" not in err  # nothing was said: nothing to continue
