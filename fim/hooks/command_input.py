"""What a command hook's process is given, and the environment file it may hand back.

Kept apart from the hook because it decides what leaves fim for a user's script: the event
as Claude Code's JSON (its tool names where fim has an equivalent), masked, the run so far as a
masked JSONL transcript in Claude Code's shapes, and an allow-listed environment, so model
and connector keys stay in fim. A SessionStart hook's `export NAME=value` lines come back
through `read_env_file`.

Values that cross here are secrets when they would be anywhere else (`fim.masking`): what an
`env: [NAME]` list passes through is read from fim's environment like a `${NAME}` (the
loader records it; `environment` remembers it again for hooks built without a load), and
what a SessionStart hook exports is a secret by the rule for literals in YAML: under a
credential-looking name, or a URL's password.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fim import private
from fim.config.child_env import network_env
from fim.config.interpolate import base_env, passed_anyway
from fim.hooks.claude import to_claude
from fim.hooks.transcript_file import conversation
from fim.hooks.transcript_file import write_transcript as write_transcript
from fim.masking import config_secrets, known, remember
from fim.types import HookContext

if TYPE_CHECKING:
    from fim.run.services import RunContext


def event_payload(
    context: HookContext,
    root: str,
    transcript_path: str | None,
    files: Path | None = None,
    run: RunContext | None = None,
) -> dict[str, Any]:
    """The event as the JSON a Claude Code hook reads on stdin, plus fim's own names
    (`file_ops` paths absolute under `files`, as Claude Code gives them).

    `session_id` is the conversation's, as Claude Code's stays one for a whole
    conversation: the fim session's when the run belongs to one (`fim run --session`, a
    `session_id` over HTTP), else the id of the run the request started (a run is then
    the whole conversation), decided once for the whole run tree: a delegate's and a
    workflow node's hooks get it too (`fim.hooks.transcript_file.conversation`). The
    judged call's run id is `fim.run_id` either way. SessionStart's `source` is `resume`
    when the session already has messages (Claude Code's `--resume`), else `startup`; fim
    has no `clear`, and a compaction does not start the session again (no `compact`).
    The session's id was
    the run's before, new at every turn: a hook's per-session state (a warn-once flag file,
    a log per session) was lost at each one, and every turn was a `startup`."""
    session = _session_of(run)
    data: dict[str, Any] = {
        "session_id": conversation(run, context),
        "transcript_path": transcript_path,
        "cwd": root,
        "permission_mode": "default",
        "hook_event_name": context.point,
    }
    if context.point == "SessionStart":
        data["source"] = context.metadata.get("source") or (
            "resume" if session and _continues(run) else "startup"
        )
    else:
        claude = to_claude(context.tool_name, context.tool_args, context.metadata, files)
        name, args = claude or (context.tool_name, context.tool_args or {})
        data["tool_name"] = name
        data["tool_input"] = args
        if context.metadata.get("call_id"):
            data["tool_use_id"] = context.metadata["call_id"]
    if context.point == "PostToolUse":
        data["tool_response"] = _as_json(context.tool_result)
    data["fim"] = {
        "agent": context.agent,
        "run_id": context.run_id,
        "tool_name": context.tool_name,
        "tool_input": context.tool_args,
        "metadata": {k: v for k, v in context.metadata.items() if _jsonable(v) and k[:1] != "_"},
    }
    return masked(data, run)


def masked(data: dict[str, Any], run: RunContext | None) -> dict[str, Any]:
    """`data` as the JSON the command reads, with every secret masked in every string
    (`fim.masking`: what the process knows, and the run's snapshot's own), whatever field
    holds it: the command's stdin is an exit, like the transcript beside it. Masked once
    here, where the JSON is built, so no event and no new field goes out raw: a `shell`,
    `python_exec`, project or MCP tool's result (masked only on its way to the model,
    after the hooks), the arguments, an error's text (attack-60 F1: a logging hook wrote a
    `sandbox.env` token, raw and in base64, to its file). Values JSON has no type for
    become text first (`str`, as `json.dumps` would write them), so they are masked too.
    A hook that must see raw values is a Python hook: it runs in fim's process."""
    value = json.loads(json.dumps(data, default=str))
    value = known().value(value)
    return run.snapshot.masker.value(value) if run is not None else value


def _session_of(run: RunContext | None) -> str | None:
    """The session the run belongs to (its store key), if any."""
    return (run.session or None) if run is not None else None


def _continues(run: RunContext | None) -> bool:
    """Whether the run's conversation holds an earlier turn (an answer or a tool result)
    before its prompt: the session is resumed, not started."""
    messages = run.transcript if run is not None else []
    return any(getattr(m, "role", None) in ("assistant", "tool") for m in messages)


def environment(
    context: HookContext,
    declared: list[str] | dict[str, str],
    root: str,
    env_file: str | None,
) -> dict[str, str]:
    """The allow-listed environment (`HOOK_BASE_ENV`: PATH, HOME, LANG, LC_* ...), the CA
    bundle and proxy variables (a proxy URL only without credentials: `fim.config.
    child_env`), what the declaration lists under `env:`, and the protocol's CLAUDE_*/FIM_*
    variables. Nothing else: model and connector keys stay in fim."""
    env = {k: v for k, v in os.environ.items() if base_env(k)}
    env.update(network_env(os.environ)[0])
    env.setdefault("PATH", os.defpath)
    if isinstance(declared, dict):
        env.update({k: str(v) for k, v in declared.items()})
    else:
        passed = {k: os.environ[k] for k in declared if k in os.environ}
        # The loader recorded these; a hook built without a load (fim.testing, a library
        # caller's Snapshot) or a value changed since would otherwise go out raw.
        remember(v for k, v in passed.items() if not passed_anyway(k, v))
        env.update(passed)
    env["CLAUDE_PROJECT_DIR"] = root
    env["FIM_PROJECT_DIR"] = root
    env["FIM_AGENT"] = context.agent
    env["FIM_RUN_ID"] = context.run_id
    env["FIM_HOOK_EVENT"] = context.point
    # Last, over a declared value too: the pins' promise is fim's (see `bytecode_folder`).
    env["PYTHONPYCACHEPREFIX"] = bytecode_folder()
    if env_file is not None:
        env["CLAUDE_ENV_FILE"] = env_file
    return env


_bytecode: tuple[int, str] | None = None
_bytecode_lock = threading.Lock()


def bytecode_folder() -> str:
    """Where a command hook's Python keeps its bytecode (`PYTHONPYCACHEPREFIX`): a folder of
    this process's own (0700, made once, removed at exit), never the hook folders'
    `__pycache__`.

    The pins cover a hook's sources, not `hooks/__pycache__/` (the interpreter writes
    there on every import): a `.pyc` rewritten there with the source's mtime and size in
    its header ran code the snapshot never saw, and the check before the call passed
    (attack-24). With the prefix set, Python neither reads nor writes a `__pycache__` of
    the project. Made again if it went away or is no longer this user's alone (a tmp
    cleaner), so the hook never writes to a path another user could make first."""
    global _bytecode
    with _bytecode_lock:
        if (
            _bytecode is not None
            and _bytecode[0] == os.getpid()
            and private.still_ours(_bytecode[1])
        ):
            return _bytecode[1]
        folder = private.process_folder("fim-pycache-")
        _bytecode = (os.getpid(), folder)
        return folder


def read_env_file(path: str) -> dict[str, str]:
    """`export NAME=value` / `NAME=value` lines a SessionStart hook wrote to CLAUDE_ENV_FILE.

    The values that are credentials (`GH_TOKEN=...`, a `DATABASE_URL`'s password) are
    remembered as secrets: they reach the `shell` tool, whose output goes to every exit.
    The script wrote them as literals, so the rule is the one for literals in YAML
    (`fim.masking.config_secrets`), not the one for `${VAR}`: `NODE_ENV=production` stays
    readable, as it would in a declaration."""

    found: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError:
        return found
    for line in text.splitlines():
        match = re.match(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line)
        if match is None:
            continue
        try:
            parts = shlex.split(match.group(2))
        except ValueError:
            continue
        found[match.group(1)] = parts[0] if parts else ""
    remember(config_secrets(found))
    return found


def _as_json(text: str | None) -> Any:
    """A JSON observation as its value (Claude Code scripts read `.tool_response.field`)."""
    if text is None:
        return None
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        with contextlib.suppress(ValueError):
            return json.loads(stripped)
    return text


def _jsonable(value: Any) -> bool:
    return isinstance(value, str | int | float | bool | type(None) | list | dict)
