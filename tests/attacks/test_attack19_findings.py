"""Attack round 19 (secrets at the exits added or changed lately): each confirmed leak is
pinned here as a test that asserts the secret does not come out (strict xfails until the
fix: each text is now masked before it is reshaped or cut, `tests/masking/test_masking_cuts.py`).
`/work/notes/attack-19.md` has the reproduction and the fix location of each.

All three are text fim reshapes or cuts *before* it is masked, so what reaches the exits
is no longer a form the masker knows: a multi-line secret flattened onto one line, a
prefix of a secret left by a cut."""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
from pathlib import Path

import pytest

from fim import masking
from fim.build.compile import compile_project
from fim.events import Event
from fim.llm.script import text, tool_call
from fim.llm.scripted import ScriptedModel
from fim.masking import known, remember
from fim.mcp.transport import StderrLog
from fim.testing.runs import run_events

FIM_YAML = (
    'name: a19\nstate: "sqlite:///.fim/state.db"\n'
    "models: {general: scripted}\ntool_selection: {enabled: false}\n"
)


def write(root: Path, files: dict[str, str]) -> Path:
    for name, body in {"fim.yaml": FIM_YAML, **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    return root


def hook_events(root: Path, expression: str) -> list[Event]:
    """The hook events of one run whose model calls the calculator once with `expression`."""
    snapshot = compile_project(root)
    model = ScriptedModel([tool_call("calculator", {"expression": expression}), text("done")])
    events = asyncio.run(run_events(snapshot, "a", "go", model=model))
    return [e for e in events if e.type == "hook"]


def pieces(secret: str, shown: str, at_least: int = 8) -> list[str]:
    """The prefixes of `secret`, `at_least` characters or longer, that `shown` holds."""
    return [secret[:n] for n in range(at_least, len(secret) + 1) if secret[:n] in shown]


# ------------------------------------------------ #1 MCP stderr flattened before masking

PEM = (
    "-----BEGIN PRIVATE KEY-----\n"
    + "\n".join(
        f"MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQa19Pem{i:02d}" for i in range(4)
    )
    + "\n-----END PRIVATE KEY-----"
)
WRAPPED_TOKEN = "sk-live-a19-wrapped-0123456789abcdefghijklmnopqrstuvwxyz"


@pytest.mark.parametrize("case", ["pem", "wrapped-base64"])
def test_an_mcp_servers_stderr_tail_masks_a_multi_line_secret(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the process-wide set is put back afterwards: a secret with a space (the PEM's header)
    # would make every later stream in this process hold back more text
    monkeypatch.setattr(masking, "_known", masking.known())
    remember([PEM, WRAPPED_TOKEN])
    log = StderrLog()
    try:
        if case == "pem":
            written = f"error: GITHUB_APP_KEY is not an RSA key:\n{PEM}\n"
        else:  # what `base64` and MIME print: 76 characters a line
            written = "config:\n" + base64.encodebytes(f"token={WRAPPED_TOKEN}".encode()).decode()
        os.write(log.file.fileno(), written.encode())
        tail = log.tail()
    finally:
        log.close()
    body = "".join(tail.split(" | ")[1:]).replace(" ", "")
    if case == "pem":
        assert "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQa19Pem00" not in tail
    else:
        try:  # a masked body ("***") decodes to nothing or fails: either way no token
            decoded = base64.b64decode(body + "=" * (-len(body) % 4)).decode("utf-8", "replace")
        except binascii.Error:
            decoded = ""
        assert WRAPPED_TOKEN not in decoded


# ------------------------------------------------ #2 a command hook's name, cut then masked

HOOK_TOKEN = "tok-a19-Audit-Secret-0123456789abcdef"


def test_a_command_hooks_name_shows_no_piece_of_a_secret_in_its_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A19_AUDIT_TOKEN", HOOK_TOKEN)
    command = (
        'true -H "Authorization: Bearer ${A19_AUDIT_TOKEN}" http://127.0.0.1:9/audit; '
        'echo \'{"decision": "block", "reason": "audit refused"}\''
    )
    quoted = command.replace("'", "''")  # YAML single-quoted
    agent = (
        "description: d\nmodel: general\ntools: [calculator]\nhooks:\n"
        f"  - event: PreToolUse\n    command: '{quoted}'\n"
    )
    write(tmp_path, {"agents/a.yaml": agent})
    events = hook_events(tmp_path, "6*7")
    assert events, "the hook ran"
    shown = known().text(" ".join(str(e.model_dump()) for e in events))
    assert pieces(HOOK_TOKEN, shown) == []


# ------------------------------------------------ #3 a command hook's plain output, cut then masked

AUDIT_SCRIPT = """import json, os, sys
data = json.load(sys.stdin)
print(f"audited {data['tool_input']['expression']} with {os.environ['A19_HOOK_KEY']}")
"""


def test_a_command_hooks_plain_output_is_masked_before_it_is_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A19_HOOK_KEY", HOOK_TOKEN)
    agent = (
        "description: d\nmodel: general\ntools: [calculator]\nhooks:\n"
        "  - event: PreToolUse\n    command: 'python3 hooks/audit.py'\n    env: [A19_HOOK_KEY]\n"
    )
    write(tmp_path, {"agents/a.yaml": agent, "hooks/audit.py": AUDIT_SCRIPT})
    # 'audited ' (8) + 169 + ' with ' (6): the 200-character cut falls 17 characters into the key
    events = hook_events(tmp_path, "1+" * 84 + "1")
    shown = known().text(" ".join(s for e in events for s in getattr(e, "side_effects", [])))
    assert "output: audited" in shown, "the hook's output is reported"
    assert pieces(HOOK_TOKEN, shown) == []
