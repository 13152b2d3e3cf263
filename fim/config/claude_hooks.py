"""What a Claude Code user pastes into a project, answered in fim's words: a settings.json
`hooks:` block becomes the same hooks in fim's list form, and an event fim has no
equivalent of is named as such. Its own module because it knows Claude Code's shapes, which
change for other reasons than how a validation problem is worded (`fim.config.problems`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, get_args

from pydantic_core import ErrorDetails

from fim.config.yamlio import Path_
from fim.types import HookPoint

CLAUDE_ONLY_EVENTS = (
    "UserPromptSubmit",
    "Stop",
    "SubagentStop",
    "Notification",
    "PreCompact",
    "SessionEnd",
    "PermissionRequest",
    "PostToolUseFailure",
    "SubagentStart",
    "Setup",
)
"""Claude Code hook events fim has no equivalent of (fim runs SessionStart, PreToolUse and
PostToolUse): pasted from a settings.json they deserve a plain "not supported" (the last
four are in disler/claude-code-hooks-mastery's settings.json: a block with only those got
the bare "expected a list")."""
_FIM_EVENTS: tuple[str, ...] = get_args(HookPoint)


def unsupported(value: Any) -> list[str]:
    """The events of a settings.json `hooks:` block fim does not run."""
    return [str(e) for e in value if e not in _FIM_EVENTS] if isinstance(value, dict) else []


def _runnable(value: Any) -> Iterator[tuple[str, Any, str]]:
    """(event, matcher, command) of each command hook of a settings.json `hooks:` block
    fim can run (of the events it supports), in order; any other shape is skipped."""
    for event, groups in value.items() if isinstance(value, dict) else ():
        if event not in _FIM_EVENTS:
            continue
        for group in groups if isinstance(groups, list) else []:
            group = group if isinstance(group, dict) else {}
            hooks = group.get("hooks")
            for hook in hooks if isinstance(hooks, list) else []:
                command = hook.get("command") if isinstance(hook, dict) else None
                if isinstance(command, str):
                    yield str(event), group.get("matcher"), command


def commands_of(value: Any) -> list[str]:
    """The commands of a settings.json `hooks:` block fim can run, in order."""
    return [command for _, _, command in _runnable(value)]


def yaml_string(text: str) -> str:
    """`text` as a YAML flow scalar that reads back as `text`: single-quoted when its JSON
    string holds it as typed and it has no quote, else JSON's own double-quoted form (YAML
    reads JSON's `\\n`, `\\"` and `\\\\` the same). A settings.json command such as
    `# guard\\n[ ... ] || exit 2` pasted into '...' kept `\\n` as typed: the whole command
    became a shell comment and the guard allowed every call (claude-code-showcase)."""
    if _plain(text) and "'" not in text:
        return f"'{text}'"
    return json.dumps(text, ensure_ascii=False)


def _plain(text: str) -> bool:
    """Whether JSON writes `text` as typed (no `"`, `\\` or control character to escape)."""
    return json.dumps(text, ensure_ascii=False)[1:-1] == text


def pasted_claude_hooks(
    err: ErrorDetails, path: Path_, label: str, *, masked: bool = False
) -> tuple[str, str | None] | None:
    """(message, hint) for what a Claude Code user pastes: a settings.json `hooks:` block
    (`{PreToolUse: [{matcher, hooks: [{type: command, command}]}]}`), answered with the
    same hooks in fim's list form, or one of Claude's events fim does not have. `masked`
    shows each command as `...`, quoted as it must be pasted (a command may hold a token)."""
    value = err["input"]
    if err["type"] == "literal_error" and path[-1:] == ("event",) and value in CLAUDE_ONLY_EVENTS:
        return (
            f"{label}: '{value}' is a Claude Code event not supported by fim "
            f"(supported: {', '.join(_FIM_EVENTS)})",
            None,
        )
    if err["type"] != "list_type" or path[-1:] != ("hooks",) or not isinstance(value, dict):
        return None
    events = [str(k) for k in value]
    if not any(e in _FIM_EVENTS or e in CLAUDE_ONLY_EVENTS for e in events):
        return None
    items = []
    for event, matcher, command in _runnable(value):
        masked_form = "'...'" if _plain(command) else '"..."'  # a command may hold a token
        shown = masked_form if masked else yaml_string(command)
        item = f"event: {event}"
        if matcher and isinstance(matcher, str):
            item += f", matcher: {yaml_string(matcher)}"
        items.append("{" + item + f", command: {shown}" + "}")
    form = f"hooks: [{', '.join(items[:3])}{', ...' if len(items) > 3 else ''}]"
    hint = "one item per hook, each with its event: " + (form if items else "- event: ...")
    if unsupported(value):
        hint += (
            f"; {', '.join(unsupported(value))}: not supported by fim "
            f"(supported: {', '.join(_FIM_EVENTS)})"
        )
    return (f"{label}: this is Claude Code's settings.json shape; fim expects a list", hint)
