"""`fim validate` refuses an HTTP connector header no request can carry (attack-60 F2).

A header's value is ASCII text without a line break or a space at either end. A key holding
`ä` validated, then every call failed with Python's `UnicodeEncodeError`, which named the
character and its position: one character of the credential, at every exit. Now it is a
problem at the header, naming the header and the variable its value reads, never the value
or the character.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.inprocess_cli import run_fim

KEY = "k3y-P\u00e4ss-0123456789"


def fim(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_fim(*args, "--project", str(root), cwd=root, timeout=60)


def project(root: Path, connector: str) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "connectors").mkdir()
    (root / "fim.yaml").write_text('name: p\nstate: "sqlite:///.fim/state.db"\n')
    (root / "s.yaml").write_text("- text: hi\n")
    (root / "agents" / "a.yaml").write_text("model: scripted:s.yaml\nconnectors: [api]\n")
    (root / "connectors" / "api.yaml").write_text(
        "kind: http\ndescription: an API\nbase_url: https://api.example.com\n" + connector
    )
    return root


ACTIONS = "actions:\n  get: {method: GET, path: /thing}\n"


def test_a_non_ascii_key_is_a_problem_naming_the_header_and_variable_not_the_character(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("F2_KEY", KEY)
    root = project(tmp_path / "p", 'headers: {X-Api-Key: "${F2_KEY}"}\n' + ACTIONS)
    done = fim(root, "validate")
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == (
        "connectors/api.yaml:4:22: header 'X-Api-Key' (read from F2_KEY): its value holds a "
        "character outside ASCII, which an HTTP header cannot carry; every call of this "
        "connector would fail before it is sent (check the value of F2_KEY: a character "
        "pasted by mistake, a key read from a file with its line break, or a value the "
        "service wants encoded)"
    )
    said = done.stdout + done.stderr
    assert "\u00e4" not in said and "xe4" not in said and "position" not in said
    assert "Traceback" not in said


@pytest.mark.parametrize(
    ("key", "connector", "line"),
    [
        (  # a bearer token read from a file, its line break kept
            "sk-live-0123456789\n",
            'auth: {type: bearer, token: "${F2_KEY}"}\n' + ACTIONS,
            "connectors/api.yaml:4:29: header 'Authorization' (read from F2_KEY): its value "
            "holds a line break or another control character;",
        ),
        (  # an api key in a header, a space pasted before it
            "sk-live-0123456789",
            'auth: {type: api_key, name: X-Key, key: " ${F2_KEY}"}\n' + ACTIONS,
            "connectors/api.yaml:4:41: header 'X-Key' (read from F2_KEY): its value starts "
            "or ends with a space or tab, which an HTTP header cannot carry;",
        ),
        (  # a literal in an action's own headers
            "",
            "actions:\n  get: {method: GET, path: /thing, headers: {X-Lang: fran\u00e7ais}}\n",
            "connectors/api.yaml:5:54: header 'X-Lang': its value holds a character outside "
            "ASCII, which an HTTP header cannot carry;",
        ),
        (
            "",
            "headers: {X Api Key: abcd}\n" + ACTIONS,
            "connectors/api.yaml:4:11: header 'X Api Key': its name holds a character a "
            "header name cannot have",
        ),
    ],
    ids=["bearer-newline", "api-key-space", "action-literal", "bad-name"],
)
def test_every_header_a_request_carries_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, connector: str, line: str
) -> None:
    monkeypatch.setenv("F2_KEY", key)
    done = fim(project(tmp_path / "p", connector), "validate")
    assert done.returncode == 1
    assert done.stdout.startswith(line), done.stdout


def test_ascii_headers_validate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("F2_KEY", "sk-live 0123456789")  # a space inside is header text
    connector = 'headers: {X-Api-Key: "${F2_KEY}", Accept: "*/*"}\n' + ACTIONS
    done = fim(project(tmp_path / "p", connector), "validate")
    assert done.returncode == 0, done.stdout + done.stderr
