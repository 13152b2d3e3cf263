"""Attack 62, finding 2: a secret file is its token, however many line breaks end it.

`${file:/path}` (and `VAR_FILE`) took one trailing newline off, so a file that ends in a
blank line (`tok\\n\\n`: `echo "tok\\n"` in zsh, an editor's final newline after a pasted
one) registered `tok\\n` as the secret. The program given it strips whitespace, uses `tok`
and may print it, and the bare `tok` was masked nowhere. Now a secret file is its text
without its trailing line breaks (`\\n`, `\\r\\n`, `\\r`, however many) and without a
leading UTF-8 byte order mark (Notepad), and every secret value, a file's or a variable's,
is masked by its core without surrounding whitespace too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.config.interpolate import interpolate
from fim.config.yamlio import parse

ENDINGS = {
    "blank line": b"%s\n\n",
    "crlf blank line": b"%s\r\n\r\n",
    "bom and newline": b"\xef\xbb\xbf%s\n",
}


def expand(text: str, env: dict[str, str]) -> tuple[object, set[str]]:
    doc = parse(text, "connectors/status.yaml")
    secrets: set[str] = set()
    interpolate(doc, secrets, env)
    assert doc.unset == []
    return doc.data, secrets


@pytest.mark.parametrize("ending", ENDINGS.values(), ids=ENDINGS.keys())
def test_a_file_reference_is_the_token_without_line_breaks_or_bom(
    tmp_path: Path, ending: bytes
) -> None:
    secret = tmp_path / "token"
    secret.write_bytes(ending % b"tok-F2-abc")
    data, secrets = expand(f'token: "${{file:{secret}}}"\n', {})
    assert data == {"token": "tok-F2-abc"} and secrets == {"tok-F2-abc"}
    data, secrets = expand('token: "${TOKEN}"\n', {"TOKEN_FILE": str(secret)})
    assert data == {"token": "tok-F2-abc"} and secrets == {"tok-F2-abc"}


def test_a_variable_with_surrounding_whitespace_is_masked_by_its_core_too() -> None:
    data, secrets = expand('token: "${TOKEN}"\n', {"TOKEN": "  tok-F2-env \n"})
    assert data == {"token": "  tok-F2-env \n"}  # the value is passed on as given ...
    assert secrets == {"  tok-F2-env \n", "tok-F2-env"}  # ... and its core is masked too


def test_a_core_too_short_to_mask_is_not_added() -> None:
    _, secrets = expand('token: "${TOKEN}"\n', {"TOKEN": " ab \n"})
    assert secrets == {" ab \n"}


TOOLS = '''
def leak() -> str:
    """Return the token as a program given the secret would print it."""
    return "the token is " + open({path!r}, encoding="utf-8-sig").read().strip()
'''


@pytest.mark.parametrize("ending", ENDINGS.values(), ids=ENDINGS.keys())
def test_a_tool_printing_the_bare_token_is_masked_in_fim_run_json(
    tmp_path: Path, ending: bytes
) -> None:
    token = f"FILETOK-{len(ending)}-{ending[-2:].hex()}-Zq81"  # one per case: masking is global
    secret = tmp_path / "secret"
    secret.write_bytes(ending % token.encode())
    root = tmp_path / "p"
    for folder in ("agents", "hooks", "scripts"):
        (root / folder).mkdir(parents=True)
    (root / "fim.yaml").write_text(
        "name: p\nmodels: {general: scripted:scripts/s.yaml}\nstate: sqlite:///.fim/state.db\n"
    )
    (root / "hooks" / "tools.py").write_text(TOOLS.format(path=str(secret)))
    (root / "scripts" / "s.yaml").write_text(
        f'- tool_calls: [{{name: leak, arguments: {{}}}}]\n- text: "done {token}"\n'
    )
    (root / "agents" / "leaker.yaml").write_text(
        "description: leaks\ninstructions: Leak.\ntools: [tools:leak]\n"
        f'sandbox: {{env: {{A: "${{file:{secret}}}"}}}}\n'
    )
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    result = CliRunner().invoke(app, ["run", "leaker", "hi", "--json", "-p", str(root)])
    assert result.exit_code == 0, result.stdout + result.stderr
    out = result.stdout + result.stderr
    assert token not in out
    assert "***" in out
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert any("the token is ***" in json.dumps(e) for e in events)
