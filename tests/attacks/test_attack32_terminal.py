"""Text from outside reaches the terminal escaped (attack-32 #4 and what the review of it
found): `fim connector import`'s warnings quote a downloaded spec (a duplicate key, a
schema name), `fim sessions show` and `forget` print a session id an HTTP client chose;
neither can set the window title or write the clipboard."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from fim.cli import app

ESCAPES = "\x1b]52;c;cHduZWQ=\x07\x1b]0;PWNED\x07"


def test_a_warning_quoting_the_document_reaches_the_terminal_without_its_escapes(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "dup.yaml"
    path = "/" + ESCAPES
    spec.write_text(
        'openapi: "3.0.0"\ninfo: {title: t}\nservers: [{url: "http://127.0.0.1:9/api"}]\n'
        "paths:\n  /a:\n    get: {operationId: a}\n"
        f'  "{path.encode("unicode_escape").decode()}":\n    get: {{operationId: b}}\n'
        f'  "{path.encode("unicode_escape").decode()}":\n    get: {{operationId: c}}\n'
    )
    result = CliRunner().invoke(
        app, ["connector", "import", str(spec), "--name", "x", "--out", "-"]
    )
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings, result.stderr
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert any("PWNED" in line for line in warnings)  # said, made harmless


def test_a_session_id_a_client_chose_is_printed_escaped(tmp_path: Path) -> None:
    import asyncio

    from fim.store import Store
    from fim.store.sessions import Sessions
    from fim.types import Message

    (tmp_path / "fim.yaml").write_text('name: p\nstate: "sqlite:///.fim/state.db"\n')
    chosen = "s" + ESCAPES
    store = Store("sqlite:///.fim/state.db", root=tmp_path)
    try:
        asyncio.run(Sessions(store).save(chosen, "", [Message(role="user", content="hi")]))
    finally:
        store.close()
    for command in ("show", "forget"):
        result = CliRunner().invoke(app, ["sessions", command, chosen, "--project", str(tmp_path)])
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.output and "\\x1b]52" in result.output, command
