"""The conversation a command hook is told about: its `session_id` and the JSONL file
`transcript_path` names (lines in Claude Code's shapes: `fim.hooks.claude_transcript`).

One conversation per request. A delegate (`call_agent`), a workflow an agent starts
(`run_workflow`), its `mcp` / `tool` / `agent` / `llm` nodes and the runs those start are
one tree (`fim.run.tree`), and every hook of it gets the `session_id` its root decided: the
root's session (its store key), else the root run's id. So does every line of the
transcript (`sessionId`). A Claude Code subagent's calls carry the main conversation's
`session_id` too; fim gave each delegate and workflow node a session of its own when the
request had none, and a guard allowing a tool "once per session" allowed it once per
delegate (attack-59 F1).

The file is the transcript of the run whose call the hook judges (the hook context's
`run_id`), whichever chain's hook it is: the caller's hooks judging a delegate's call (they
hold there too, `fim.hooks.stacked`) read the delegate's file, not their own run's.

- A run the request started itself: its messages so far.
- A delegate (or a workflow's `agent` node): first the conversation of the run that started
  it as that run's hooks read it now (up to the `call_agent` / `run_workflow` call, itself
  after its own caller's), then the delegate's own messages (its task, its calls so far),
  each line marked `"isSidechain": true` with `"agentId"` its run id. Claude Code gives a
  subagent's hook the main session's transcript and writes the subagent's lines, so marked,
  in a transcript of their own; fim gives both in the one file `transcript_path` names, so
  a guard reading it (Claude Code's documented `jq` over `.message.content[]`) judges a
  delegate's call on the whole conversation, the caller's earlier calls and the delegate's
  alike. Before, a delegate's hook read the caller's conversation alone, in a file named
  after the delegate's run: the delegate's own calls were never in it (attack-59 F3).
- A call of a workflow node (`mcp`, `tool`, ...) is no run's message: its hook reads the
  transcript of the agent run that started the workflow.

What a caller's own file holds after its delegate returned is the caller's messages (the
`call_agent` call and its result), not the delegate's lines, as Claude Code's main
transcript holds a subagent's `Task` call and its result: a guard counting calls across
delegates keys its state on `session_id`.

Each record is one line by any reader's rule: the characters Python's `str.splitlines()`
(and some JavaScript readers) split on, U+2028, U+2029, U+0085 and the C0 separators, are
written as JSON escapes (attack-59 F6: a guard reading `read().splitlines()` and skipping
what it could not parse missed the call whose arguments held one).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fim import private
from fim.hooks.claude_transcript import call_targets, entry
from fim.tools.builtin._common import sandbox_dir
from fim.types import HookContext

if TYPE_CHECKING:
    from fim.run.services import RunContext

LINE_BREAKS = {c: f"\\u{c:04x}" for c in (0x0B, 0x0C, 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029)}
"""Line separators other than `\\n` and `\\r` (which JSON always escapes), as JSON escapes:
`str.translate` table for a JSON text written with `ensure_ascii=False`, where they only
occur inside strings."""


def conversation(run: RunContext | None, context: HookContext) -> str:
    """The `session_id` of a hook of `run` judging `context`: the conversation its run tree
    belongs to (`fim.run.tree.RunSpend.conversation`), else (a run built outside a tree:
    `fim.testing`, a workflow taken over in another process) its session, else the run
    id of the call."""
    spend = run.spend if run is not None else None
    if spend is not None and spend.root.conversation:
        return str(spend.root.conversation)
    return (run.session if run is not None else None) or context.run_id


def judged_run(run: RunContext, context: HookContext) -> RunContext:
    """The run whose call `context` is, found in `run`'s tree (`RunSpend.judged`), else
    `run` itself."""
    spend = run.spend
    found = spend.judged(context.run_id) if spend is not None else None
    return found if found is not None else run


def write_transcript(run: RunContext | None, context: HookContext) -> str | None:
    """Write the transcript of the run whose call `context` is (see the module), masked,
    and return its path: `<run id>.jsonl` in the project's transcripts folder.

    Appended to: each hook call writes only the messages added since the last one
    (`RunContext.transcript_written` of that run). Rewriting the whole conversation at
    every call, on the event loop, cost a long run with a hook on each tool call time
    quadratic in its length. The file is written whole again if it went away or the
    history was replaced."""
    if run is None:
        return None
    judged = judged_run(run, context)
    path = private.transcripts(judged.snapshot.root) / f"{judged.run_id}.jsonl"
    private.parents(path)
    start = judged.transcript_written
    if start > len(judged.transcript) or (start and not path.exists()):
        start = 0
    session = conversation(run, context)
    current = (context.tool_name or "", context.tool_args or {}, context.metadata)
    lines = [] if start else _callers(judged, session)
    lines += _lines(judged, session, start, current)
    with path.open("a" if start else "w", encoding="utf-8") as out:
        out.write("".join(f"{line}\n" for line in lines))
    judged.transcript_written = len(judged.transcript)
    return str(path)


def _lines(
    run: RunContext,
    session: str,
    start: int = 0,
    current: tuple[str, dict[str, Any], dict[str, Any]] | None = None,
) -> list[str]:
    """`run`'s messages from `start` as masked JSON lines, a delegate's marked as one."""
    target = call_targets(run.views, run.snapshot.project.mcp_servers, current)
    files: Path = sandbox_dir(run)
    mask = run.snapshot.masker.value
    caller = _caller(run)
    lines = []
    for message in run.transcript[start:]:
        line = entry(message, session, files, target)
        if caller is not None:
            line.update(isSidechain=True, agentId=run.run_id)
        text = json.dumps(mask(line), ensure_ascii=False, default=str)
        lines.append(text.translate(LINE_BREAKS))
    return lines


def _callers(run: RunContext, session: str) -> list[str]:
    """The conversation of the run that started `run` (and of the runs above it, the
    request's first run first) as their hooks read it now; none for a run with no caller."""
    caller = _caller(run)
    if caller is None:
        return []
    return _callers(caller, session) + _lines(caller, session)


def _caller(run: RunContext) -> RunContext | None:
    """The run that started `run` (its delegate's or workflow's caller), if it has one."""
    parent = run.spend.parent if run.spend is not None else None
    while parent is not None and parent.run is None:  # an `llm` node's run has no messages
        parent = parent.parent
    return parent.run if parent is not None else None


__all__ = ["LINE_BREAKS", "conversation", "judged_run", "write_transcript"]
