"""Text shown in part is masked whole, then cut: every exit that squeezes, joins or cuts a
text that can hold a secret (a hook's output or stderr, an MCP server's stderr or listing,
a failed agent's output, a workflow input, a template, a driver's error, a model's reply)
masks it first, with `Masker.head` / `Masker.tail` for the cut.

Cut first and masked later, a text keeps the piece of a secret before (or after) the cut,
which no form of the secret matches; squeezed or joined first, a multi-line secret (a PEM
key) or base64 wrapped over lines is no form either. Each site is fed the same three
shapes, placed so that a cut taken first would fall inside the secret: a one-line token,
a multi-line key and a token base64-encoded and wrapped at 76 columns (attack round 19)."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from fim import masking
from fim.config.schema import HookSpec, WorkflowInput
from fim.connectors.database import describe_error
from fim.errors import RunError
from fim.hooks.build import display_name
from fim.hooks.command import CommandHook
from fim.hooks.command_output import interpret
from fim.json_paths import PathError, query
from fim.masking import MASK, Masker, known, remember
from fim.mcp.resources import about
from fim.mcp.transport import StderrLog
from fim.run.selection import parse_choice
from fim.server.routes import decider
from fim.tools import ToolRegistry, tool
from fim.types import HookContext
from fim.workflows import nodes
from fim.workflows.inputs import validate_inputs
from fim.workflows.node_types.base import NodeError
from fim.workflows.templates import TemplateError, render_text

TOKEN = "tok-cuts-Secret-0123456789abcdefXYZ"
PEM_LINES = [f"MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQcutPem{i:02d}" for i in range(4)]
PEM = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(PEM_LINES) + "\n-----END PRIVATE KEY-----"
WRAPPED = "sk-live-cuts-wrapped-0123456789abcdefghijklmnopqrstuvwxyz"
B64_TEXT = base64.encodebytes(f"token={WRAPPED}".encode()).decode()  # 76 a line, as MIME
B64_BODY = base64.b64encode(WRAPPED.encode()).decode().rstrip("=")[:-2]
"""The characters of the wrapped stream that are the token's alone ("token=" is two whole
3-byte groups, so the token's encoding starts on a group)."""

SHAPES = {
    # the secret as written, and how many of its characters a cut taken first would show
    "split": (TOKEN, 20),
    "multi-line": (PEM, 45),
    "base64-wrapped": (B64_TEXT, 45),
}


@pytest.fixture(autouse=True)
def secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process-wide set holds the three secrets for one test, then is put back (a
    secret with a space, the PEM's header, makes every later stream hold back more)."""
    monkeypatch.setattr(masking, "_known", masking.known())
    remember([TOKEN, PEM, WRAPPED])


def leaked(shown: str) -> list[str]:
    """Pieces of a secret in `shown` as an exit masks it: 6 characters of the token, 8 of
    a key line, 8 of the wrapped token's base64 (searched with spaces, line breaks and
    ` | ` taken out, so a wrapped or squeezed form counts too)."""
    shown = known().text(shown)  # what the exit does anyway: only a piece is left to find
    flat = "".join(shown.replace(" | ", "").split())
    found = [TOKEN[i : i + 6] for i in range(len(TOKEN) - 5) if TOKEN[i : i + 6] in shown]
    for line in PEM_LINES:
        found += [line[i : i + 8] for i in range(len(line) - 7) if line[i : i + 8] in shown]
    found += [B64_BODY[i : i + 8] for i in range(len(B64_BODY) - 7) if B64_BODY[i : i + 8] in flat]
    return found


def at_head_cut(secret: str, shown: int, limit: int) -> str:
    """A text whose first `limit` characters end `shown` characters into `secret` (at most
    `limit` - 5), with more than a masked secret's worth after it: still cut once masked."""
    shown = min(shown, limit - 5)
    return "x" * (limit - shown) + secret + " and after it " + "z" * 200


def at_tail_cut(secret: str, shown: int, limit: int) -> str:
    """A text whose last `limit` characters start `shown` characters before `secret` ends."""
    return "w" * 200 + " before it " + secret + "y" * (limit - shown)


# --------------------------------------------------------------------------- Masker


def test_a_head_or_tail_never_ends_inside_a_mask() -> None:
    masker = Masker([TOKEN])
    text = "a" * 10 + TOKEN + "b" * 40
    for limit in (11, 12):  # the cut falls after the first or the second `*`
        head, cut = masker.head(text, limit)
        assert cut and head == "a" * 10, (limit, head)
    text = "a" * 40 + TOKEN + "b" * 10
    for limit in (11, 12):
        tail, cut = masker.tail(text, limit)
        assert cut and tail == "b" * 10, (limit, tail)
    assert masker.head("a" * 10 + TOKEN + "b" * 40, 13)[0] == "a" * 10 + MASK


# --------------------------------------------------------------------------- #1 MCP stderr


@pytest.mark.parametrize("shape", [*SHAPES, "tab"])
def test_an_mcp_servers_stderr_tail_is_masked_before_it_is_squeezed_and_cut(shape: str) -> None:
    if shape == "tab":  # a secret the squeeze would change: a tab, two spaces
        remember(["pass\tword  Secret-99"])
        written = "login failed for pass\tword  Secret-99\n"
    else:
        secret, shown = SHAPES[shape]
        written = at_tail_cut(secret, shown, 600) + "\n"
    log = StderrLog()
    try:
        os.write(log.file.fileno(), written.encode())
        tail = log.tail()
    finally:
        log.close()
    assert leaked(tail) == []
    assert "Secret-99" not in tail and "word Secret" not in tail


# --------------------------------------------------------------------------- #2 a hook's name


@pytest.mark.parametrize("shape", SHAPES)
def test_a_command_hooks_name_is_masked_before_it_is_squeezed_and_cut(shape: str) -> None:
    secret, shown = SHAPES[shape]
    name = display_name(HookSpec(command=at_head_cut(secret, shown, 57), event="PreToolUse"))
    assert name.startswith("command: xxx") and name.endswith("...")
    assert leaked(name) == []


# --------------------------------------------------------------------------- #3 a hook's output


@pytest.mark.parametrize("shape", SHAPES)
def test_a_command_hooks_plain_output_is_masked_before_it_is_cut(shape: str) -> None:
    secret, shown = SHAPES[shape]
    hook = cast(Any, SimpleNamespace(name="audit"))
    context = HookContext(point="PreToolUse", agent="a", run_id="r", tool_name="t")
    stdout = at_head_cut(secret, shown, 200)
    result = asyncio.run(interpret(hook, context, stdout, ask_timeout=1))
    (effect,) = result.side_effects
    assert effect.startswith("output: xxx") and effect.endswith("...")
    assert leaked(effect) == []


@pytest.mark.parametrize("shape", SHAPES)
def test_a_failed_hook_commands_stderr_is_masked_before_it_is_cut(
    shape: str, tmp_path: Path
) -> None:
    secret, shown = SHAPES[shape]
    (tmp_path / "err.txt").write_text(at_tail_cut(secret, shown, 500))
    hook = CommandHook(command=f"cat '{tmp_path / 'err.txt'}' >&2; exit 1", event="PreToolUse")
    context = HookContext(point="PreToolUse", agent="a", run_id="r", tool_name="t")
    result = asyncio.run(hook(context))
    assert not result.allow and "exit code 1: ..." in (result.error or "")
    assert leaked(result.error or "") == []


# --------------------------------------------------------------------------- workflows


@pytest.mark.parametrize("shape", SHAPES)
def test_a_failed_agents_output_in_a_node_error_is_masked_before_it_is_cut(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret, shown = SHAPES[shape]
    output = at_head_cut(secret, shown, 500)

    async def ask(*_: Any, **__: Any) -> Any:
        return SimpleNamespace(status="error", output=output)

    monkeypatch.setattr("fim.run.agent.ask", ask)
    monkeypatch.setattr("fim.run.overrides.output_contract", lambda *_: None)
    ctx = SimpleNamespace(
        snapshot=SimpleNamespace(agents={"a": SimpleNamespace()}),
        services=None, hooks=None, guard=None, depth=0, parents=(), workflow="w", session=None,
    )  # fmt: skip
    with pytest.raises(NodeError) as failed:
        asyncio.run(nodes.ask_agent(cast(Any, ctx), "a", "task", None))
    assert "ended with status error: xxx" in str(failed.value)
    assert leaked(str(failed.value)) == []


@pytest.mark.parametrize("shape", SHAPES)
def test_a_workflow_input_in_an_error_is_masked_before_it_is_cut(shape: str) -> None:
    secret, shown = SHAPES[shape]
    decl = cast(Any, SimpleNamespace(inputs={"n": WorkflowInput(type="integer")}))
    with pytest.raises(RunError) as refused:
        validate_inputs("w", decl, {"n": at_head_cut(secret, shown, 56)})  # 56 + the quote
    assert "input 'n' = 'xxx" in str(refused.value)
    assert leaked(str(refused.value)) == []


@pytest.mark.parametrize("shape", SHAPES)
def test_a_template_in_an_error_is_masked_before_it_is_cut(shape: str) -> None:
    secret, shown = SHAPES[shape]
    with pytest.raises(TemplateError) as failed:
        render_text(at_head_cut(secret, shown, 77) + " {{ nodes.x.", {})
    assert "template 'xxx" in str(failed.value)
    assert leaked(str(failed.value)) == []


# --------------------------------------------------------------------------- errors quoting text


@tool("add", "Add two integers.", {"type": "object", "properties": {}}, access="read")
async def add() -> str:
    return "0"


@pytest.mark.parametrize("shape", SHAPES)
def test_a_models_broken_arguments_are_masked_before_they_are_cut(shape: str) -> None:
    secret, shown = SHAPES[shape]
    raw = "{" + at_head_cut(secret, shown, 199)  # `{` + 199: the cut at 200
    said = asyncio.run(ToolRegistry([add]).check("add", {}, raw=raw)) or ""
    assert "were not valid JSON ('{xxx" in said
    assert leaked(said) == []


@pytest.mark.parametrize("shape", SHAPES)
def test_a_selectors_reply_in_an_error_is_masked_before_it_is_cut(shape: str) -> None:
    secret, shown = SHAPES[shape]
    with pytest.raises(ValueError) as failed:
        parse_choice(at_head_cut(secret, shown, 200))
    assert "in the reply 'xxx" in str(failed.value)
    assert leaked(str(failed.value)) == []


@pytest.mark.parametrize("shape", SHAPES)
def test_a_value_a_path_stops_at_is_masked_before_it_is_cut(shape: str) -> None:
    secret, shown = SHAPES[shape]
    with pytest.raises(PathError) as failed:
        query({"a": at_head_cut(secret, shown, 40)}, "$.a.b")
    assert "found a str ('xxx" in str(failed.value)
    assert leaked(str(failed.value)) == []


@pytest.mark.parametrize("shape", SHAPES)
def test_a_drivers_error_is_masked_before_it_is_cut(shape: str) -> None:
    secret, shown = SHAPES[shape]
    db = cast(Any, SimpleNamespace(dialect="postgresql", decl=SimpleNamespace(url="pg://h/d")))
    db.url = "pg://h/d"
    message = "invalid input syntax for type integer: " + at_head_cut(secret, shown, 461)
    said = describe_error(Exception(message), db)
    assert said.startswith("invalid input syntax")
    assert leaked(said) == []


@pytest.mark.parametrize("shape", SHAPES)
def test_an_mcp_servers_description_in_a_listing_is_masked_before_it_is_cut(shape: str) -> None:
    secret, shown = SHAPES[shape]
    said = about(at_head_cut(secret, shown, 200))
    assert said.startswith("xxx") and said.endswith("...")
    assert leaked(said) == []


@pytest.mark.parametrize("shape", SHAPES)
def test_an_approvers_note_is_masked_before_it_is_squeezed_and_cut(shape: str) -> None:
    secret, shown = SHAPES[shape]
    who = cast(Any, SimpleNamespace(key="fedcbafedcbafedc", operator=False))
    by = decider(who, at_head_cut(secret, shown, 200 - len("api:key:fedcbafedcba (")))
    assert by.startswith("api:key:fedcbafedcba (xxx")
    assert leaked(by) == []
