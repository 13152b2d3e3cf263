"""Hooks are guarantees the model cannot argue with: declared per agent, run in priority
order, chained, and failing closed. These tests build hooks from declarations exactly as a
run does (`build_hooks`) and push real tools through the Pre -> tool -> Post pipeline.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fim.hooks import NoHooks, build_hooks, check_hooks
from fim.testing.hooks import call_tool, make_context
from fim.tools.base import FunctionTool
from fim.types import HookContext


def echo_tool(name: str = "echo", **metadata: Any) -> tuple[FunctionTool, list[dict]]:
    """A real tool that returns its arguments and records each time it actually runs."""
    ran: list[dict] = []

    async def run(**args: Any) -> str:
        ran.append(args)
        return f"echo {sorted(args.items())}"

    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    return FunctionTool(name, "Echo the arguments", schema, run, metadata=metadata), ran


def write_hooks(root: Path, name: str, source: str) -> None:
    folder = root / "hooks"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(textwrap.dedent(source))


CHAIN = """
from fim.hooks import PreToolUseHook, PostToolUseHook, SessionStartHook, HookResult

class AddSuffix(PreToolUseHook):
    def __init__(self, suffix="!"):
        super().__init__()
        self.suffix = suffix

    async def __call__(self, context):
        text = context.tool_args.get("text", "")
        return HookResult(modified_args={**context.tool_args, "text": text + self.suffix})

class Shout(PreToolUseHook):
    async def __call__(self, context):
        return HookResult(modified_args={"text": context.tool_args["text"].upper()})

class Deny(PreToolUseHook):
    async def __call__(self, context):
        return HookResult(allow=False, error="shouting is not allowed")

class Redact(PostToolUseHook):
    async def __call__(self, context):
        return HookResult(modified_result=context.tool_result.replace("SECRET", "[redacted]"))

class Tag(PostToolUseHook):
    async def __call__(self, context):
        return HookResult(modified_result="<" + context.tool_result + ">")

class Greet(SessionStartHook):
    async def __call__(self, context):
        return HookResult(additional_context="Greet the user by name.")
"""


# ----------------------------------------------------------------------------- chaining


async def test_hooks_run_in_priority_order_and_rewritten_args_flow_on(tmp_path: Path) -> None:
    write_hooks(tmp_path, "chain", CHAIN)
    ctx = make_context(
        tmp_path,
        [
            {"python": "chain:Shout", "priority": 20},  # declared first, runs second
            {"python": "chain:AddSuffix", "priority": 10, "with": {"suffix": "?"}},
        ],
    )
    tool, ran = echo_tool()
    outcome = await call_tool(build_hooks(ctx), tool, {"text": "hi"})
    # AddSuffix ran first; Shout saw its rewrite and upper-cased it.
    assert ran == [{"text": "HI?"}]
    assert [(e.hook, e.decision) for e in outcome.events if e.point == "PreToolUse"] == [
        ("chain:AddSuffix", "modify"),
        ("chain:Shout", "modify"),
    ]


async def test_equal_priorities_keep_declaration_order(tmp_path: Path) -> None:
    write_hooks(tmp_path, "chain", CHAIN)
    ctx = make_context(tmp_path, [{"python": "chain:Shout"}, {"python": "chain:AddSuffix"}])
    tool, ran = echo_tool()
    await call_tool(build_hooks(ctx), tool, {"text": "hi"})
    assert ran == [{"text": "HI!"}]


async def test_the_first_block_stops_the_chain_and_the_tool_never_runs(tmp_path: Path) -> None:
    write_hooks(tmp_path, "chain", CHAIN)
    ctx = make_context(
        tmp_path,
        [{"python": "chain:Deny", "priority": 1}, {"python": "chain:Shout", "priority": 2}],
    )
    tool, ran = echo_tool()
    outcome = await call_tool(build_hooks(ctx), tool, {"text": "hi"})
    assert ran == []
    assert outcome.blocked and "shouting is not allowed" in outcome.observation
    assert [(e.hook, e.decision, e.reason) for e in outcome.events] == [
        ("chain:Deny", "block", "shouting is not allowed")
    ]


async def test_post_tool_use_rewrites_flow_to_the_next_hook(tmp_path: Path) -> None:
    write_hooks(tmp_path, "chain", CHAIN)
    ctx = make_context(
        tmp_path,
        [{"python": "chain:Tag", "priority": 2}, {"python": "chain:Redact", "priority": 1}],
    )
    tool, _ = echo_tool()
    outcome = await call_tool(build_hooks(ctx), tool, {"text": "SECRET"})
    assert outcome.observation == "<echo [('text', '[redacted]')]>"


async def test_session_start_context_is_collected_from_every_hook(tmp_path: Path) -> None:
    write_hooks(tmp_path, "chain", CHAIN)
    ctx = make_context(
        tmp_path,
        [
            {"python": "chain:Greet"},
            {"event": "SessionStart", "command": "echo 'Today is a holiday.'"},
        ],
    )
    result, events = await build_hooks(ctx).run(
        "SessionStart", HookContext(point="SessionStart", agent="tester", run_id="r")
    )
    assert result.allow
    assert result.additional_context == "Greet the user by name.\n\nToday is a holiday."
    assert [e.decision for e in events] == ["context", "context"]


# ----------------------------------------------------------------------------- matchers


@pytest.mark.parametrize(
    ("matcher", "blocked", "allowed"),
    [
        ("crm__*", "crm__create_lead", "shop__refund"),
        ("re:^crm__(create|delete)_", "crm__delete_lead", "crm__get_contact"),
        ("Bash|python_exec", "python_exec", "calculator"),
        ("*", "anything", None),
    ],
)
async def test_matchers_select_tools_by_glob_regex_or_alternatives(
    tmp_path: Path, matcher: str, blocked: str, allowed: str | None
) -> None:
    write_hooks(tmp_path, "chain", CHAIN)
    runner = build_hooks(make_context(tmp_path, [{"python": "chain:Deny", "matcher": matcher}]))
    tool, _ = echo_tool(blocked)
    assert (await call_tool(runner, tool, {"text": "x"})).blocked
    if allowed is not None:
        other, ran = echo_tool(allowed)
        assert not (await call_tool(runner, other, {"text": "x"})).blocked
        assert ran == [{"text": "x"}]


# ----------------------------------------------------------------------------- declarations


async def test_a_builtin_is_declared_by_use_with_options(tmp_path: Path) -> None:
    ctx = make_context(tmp_path, [{"use": "truncate", "with": {"max_chars": 300}}])
    tool = FunctionTool("big", "d", {"type": "object"}, _big)
    outcome = await call_tool(build_hooks(ctx), tool, {})
    assert len(outcome.observation) <= 300 and "characters cut" in outcome.observation


async def _big() -> str:
    return "x" * 5000


async def test_a_ref_uses_a_reusable_declaration_and_the_agent_may_override_it(
    tmp_path: Path,
) -> None:
    write_hooks(tmp_path, "chain", CHAIN)
    ctx = make_context(
        tmp_path,
        [{"ref": "no_shouting", "matcher": "loud_*"}],
        hook_decls={"no_shouting": {"python": "chain:Deny", "matcher": "never"}},
    )
    runner = build_hooks(ctx)
    loud, _ = echo_tool("loud_echo")
    quiet, ran = echo_tool("quiet_echo")
    outcome = await call_tool(runner, loud, {"text": "x"})
    assert outcome.blocked and outcome.events[0].hook == "no_shouting"
    assert not (await call_tool(runner, quiet, {"text": "x"})).blocked and ran


async def test_python_hooks_receive_with_options_and_reload_with_the_file(
    tmp_path: Path,
) -> None:
    write_hooks(tmp_path, "chain", CHAIN)
    spec = [{"python": "chain:AddSuffix", "with": {"suffix": "?!"}}]
    tool, ran = echo_tool()
    await call_tool(build_hooks(make_context(tmp_path, spec)), tool, {"text": "a"})
    write_hooks(tmp_path, "chain", CHAIN.replace("text + self.suffix", "self.suffix + text"))
    await call_tool(build_hooks(make_context(tmp_path, spec)), tool, {"text": "a"})
    assert ran == [{"text": "a?!"}, {"text": "?!a"}]


async def test_hooks_disabled_is_one_switch_that_runs_nothing(tmp_path: Path) -> None:
    write_hooks(tmp_path, "chain", CHAIN)
    ctx = make_context(tmp_path, [{"python": "chain:Deny"}], hooks_enabled=False)
    runner = build_hooks(ctx)
    assert isinstance(runner, NoHooks)
    tool, ran = echo_tool()
    assert not (await call_tool(runner, tool, {"text": "x"})).blocked and ran


# ----------------------------------------------------------------------------- fail closed

BROKEN = """
import asyncio
from fim.hooks import PreToolUseHook, PostToolUseHook, HookResult

class Raises(PreToolUseHook):
    async def __call__(self, context):
        raise RuntimeError("database of rules is down")

class Hangs(PreToolUseHook):
    async def __call__(self, context):
        await asyncio.sleep(30)
        return HookResult()

class Garbage(PreToolUseHook):
    async def __call__(self, context):
        return "yes please"

class Late(PostToolUseHook):
    async def __call__(self, context):
        return HookResult()

class NotAHook:
    pass
"""


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"python": "broken:Raises"}, "RuntimeError: database of rules is down"),
        ({"python": "broken:Hangs", "timeout": 0.2}, "timed out after 0.2s"),
        ({"python": "broken:Garbage"}, "returned str instead of a HookResult"),
        ({"python": "missing:Guard"}, "python hook module 'missing' not found"),
        ({"python": "broken:Nope"}, "has no class 'Nope'"),
        ({"python": "broken:NotAHook"}, "is not a hook class"),
        ({"python": "broken:Late", "event": "PreToolUse"}, "is a PostToolUse hook"),
        ({"use": "truncate", "with": {"max_chars": "lots"}}, "bad options for hook 'truncate'"),
        ({"use": "rate_limit", "with": {"max_calls": 1, "per": "x", "bogus": 1}}, "bogus"),
        ({"use": "confirmm"}, "unknown builtin hook 'confirmm'"),
        ({"ref": "nowhere"}, "unknown hook ref 'nowhere'"),
        ({"command": "exit 0"}, "needs an event"),
        ({"python": "broken:Raises", "matcher": "re:("}, "invalid regex matcher"),
    ],
)
async def test_a_hook_that_fails_or_cannot_be_built_blocks_the_call(
    tmp_path: Path, spec: dict, why: str
) -> None:
    write_hooks(tmp_path, "broken", BROKEN)
    ctx = make_context(tmp_path, [spec])
    tool, ran = echo_tool()
    outcome = await call_tool(build_hooks(ctx), tool, {"text": "x"})
    assert ran == []
    assert outcome.blocked and why in outcome.observation
    assert outcome.events[-1].decision == "block" and why in (outcome.events[-1].reason or "")
    # A hook that cannot be built also refuses the session: the agent does not run unguarded.
    if "not found" in why or "bad options" in why:
        result, _ = await build_hooks(ctx).run(
            "SessionStart", HookContext(point="SessionStart", agent="tester", run_id="r")
        )
        assert not result.allow


async def test_secrets_never_reach_the_trace(tmp_path: Path) -> None:
    write_hooks(
        tmp_path,
        "leak",
        """
        from fim.hooks import PreToolUseHook, HookResult
        class Leak(PreToolUseHook):
            async def __call__(self, context):
                return HookResult(allow=False, error="token s3cr3t-value rejected")
        """,
    )
    ctx = make_context(tmp_path, [{"python": "leak:Leak"}], secrets=frozenset({"s3cr3t-value"}))
    tool, _ = echo_tool()
    outcome = await call_tool(build_hooks(ctx), tool, {"text": "x"})
    assert "s3cr3t" not in outcome.observation and "s3cr3t" not in str(outcome.events)
    assert "token *** rejected" in outcome.observation


# ----------------------------------------------------------------------------- compile time


def test_check_hooks_accepts_a_valid_project(tmp_path: Path) -> None:
    write_hooks(tmp_path, "chain", CHAIN)
    ctx = make_context(
        tmp_path,
        [
            {"use": "confirm", "with": {"all": True, "timeout": 60}},
            {"use": "readonly_guard"},
            {"use": "truncate"},
            {"use": "audit_log"},
            {"use": "rate_limit", "with": {"max_calls": 5, "window": 10, "per": "connector"}},
            {"python": "chain:Redact", "event": "PostToolUse"},
            {"event": "PreToolUse", "command": "./hooks/check.sh", "matcher": "re:^crm__"},
            {"ref": "shared"},
        ],
        hook_decls={"shared": {"use": "truncate", "with": {"max_chars": 500}}},
        agent={"mcp": ["crm"]},
    )
    assert check_hooks(ctx.snapshot) == []


def test_check_hooks_reports_every_unbuildable_hook_with_a_hint(tmp_path: Path) -> None:
    write_hooks(tmp_path, "broken", BROKEN)
    ctx = make_context(
        tmp_path,
        [
            {"use": "truncat"},
            {"use": "truncate", "with": {"max_char": 10}},
            {"python": "missing:Guard"},
            {"python": "broken:Nope"},
            {"python": "broken:NotAHook"},
            {"python": "broken:Late", "event": "PreToolUse"},
            {"command": "true"},
            {"ref": "shared"},
        ],
        hook_decls={"shared": {"use": "rate_limit"}},
    )
    problems = check_hooks(ctx.snapshot)
    messages = [p.message for p in problems]
    assert len(problems) == 9, messages  # 8 on the agent + the shared declaration itself
    assert "agent 'tester' hooks[0]: unknown builtin hook 'truncat'" in messages
    assert problems[0].hint is not None and "did you mean 'truncate'" in problems[0].hint
    assert "max_char: Extra inputs are not permitted" in messages[1]
    assert problems[1].hint == "valid options under with: max_chars"
    assert "not found" in messages[2] and "has no class 'Nope'" in messages[3]
    assert "is not a hook class" in messages[4] and "is a PostToolUse hook" in messages[5]
    assert "needs an event" in messages[6] and "max_calls: Field required" in messages[7]
    assert messages[8].startswith("hook 'shared': bad options")


def test_fim_validate_reports_a_hook_that_cannot_be_built(tmp_path: Path) -> None:
    from fim.build.compile import compile_project
    from fim.errors import ConfigError

    write_hooks(tmp_path, "broken", BROKEN)
    (tmp_path / "fim.yaml").write_text("name: demo\nmodels: {general: openai/gpt-4o-mini}\n")
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "support.yaml").write_text(
        "instructions: Help.\n"
        "hooks:\n"
        "  - use: truncate\n"
        "    with: {max_chars: lots}\n"
        "  - python: broken:Late\n"
        "    event: PreToolUse\n"
    )
    with pytest.raises(ConfigError) as caught:
        compile_project(tmp_path)
    lines = [str(p) for p in caught.value.problems]
    assert len(lines) == 2, lines
    assert lines[0].startswith("agents/support.yaml:3:5: agent 'support' hooks[0]: ")
    assert "hooks[0]: bad options for hook 'truncate': max_chars" in lines[0]
    assert lines[1].startswith("agents/support.yaml:5:5: agent 'support' hooks[1]: ")
    assert "hooks[1]: class 'broken:Late' is a PostToolUse hook" in lines[1]


@pytest.mark.parametrize(
    ("matcher", "hint"),
    [
        ("database", "did you mean 'shop__query'"),  # hooks see the target, not the meta-tool
        ("Bash", "hooks see: file_ops, Read"),  # no shell on this agent
        ("mcp__.*", "hooks see:"),  # no MCP server either
        ("re:^crm__", "hooks see:"),
    ],
)
def test_validate_reports_matchers_that_can_never_fire(
    tmp_path: Path, matcher: str, hint: str
) -> None:
    from fim.config.schema import DatabaseConnector

    ctx = make_context(
        tmp_path,
        [{"event": "PreToolUse", "command": "true", "matcher": matcher}],
        agent={"tools": ["file_ops"], "connectors": ["shop"]},
    )
    db = DatabaseConnector.model_validate({"name": "shop", "kind": "database", "url": "sqlite://"})
    snapshot = dataclasses.replace(ctx.snapshot, connectors={"shop": db})
    [problem] = check_hooks(snapshot)
    assert f"matcher {matcher!r} matches no tool this agent can call" in problem.message
    assert hint in (problem.hint or "")


@pytest.mark.parametrize(
    "matcher", ["shop__query", "shop__*", "Write|Edit", "Read", "mcp__sh__.*", "sh__run_*", "*"]
)
def test_matchers_in_fims_or_claude_codes_words_pass(tmp_path: Path, matcher: str) -> None:
    from fim.config.schema import DatabaseConnector

    ctx = make_context(
        tmp_path,
        [{"event": "PreToolUse", "command": "true", "matcher": matcher}],
        agent={"tools": ["file_ops"], "connectors": ["shop"], "mcp": ["sh"]},
    )
    db = DatabaseConnector.model_validate({"name": "shop", "kind": "database", "url": "sqlite://"})
    assert check_hooks(dataclasses.replace(ctx.snapshot, connectors={"shop": db})) == []
