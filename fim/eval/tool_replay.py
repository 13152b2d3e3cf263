"""The tool calls of one eval case run, against its cassette: replay is hermetic.

A replayed model reply asks for tool calls, and a cassette is a committed file nobody
reads, so in replay the calls it asks for must not reach anything outside the process
(hooks are bypassed in eval: `readonly_guard` or `confirm` would not stop them). Every call
a case run makes through the tool registry (`fim.tools.registry.wrapping_tools`: builtins,
connector actions and the `connector`/`database`/`mcp` fronts, MCP and Python tools, a
delegate's calls, a workflow's tool, connector, database and MCP nodes) passes here:

- `record`: the call runs and its result is stored in the cassette, masked, under
  `tool_key(tool_call(target, target arguments), occurrence)` (the target: what a
  meta-tool runs).
- `replay`: a recorded result is returned and nothing runs. A call with no recorded result
  runs only when the tool is pure (`metadata["pure"]`, set on the builtins that touch no
  network, file, process or state); otherwise it is not run, the model is told so, and
  the case ends as a cassette miss (`ToolTape.miss`) even if the rest of the run went on.
- `live` installs no tape: everything runs, as the user asked.

The tools that only steer the run itself (`ORCHESTRATING`) always run: what they start
(a delegate's run, a workflow's nodes) makes its calls through this tape again.

A project Python tool (`module:function` of the hooks folder, an agent's or a workflow
node's) is recorded with its module's file and a hash of its source (`code_of`), and a
result recorded from other code than the module holds now is not replayed: the case is a
cassette miss naming the tool (newcomer51 #4: an edit of `hooks/orders.py` passed on the
result the old code gave). The changed tool is not run either. A result recorded before
fim stored the hash is replayed unpinned, and logged once per process.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fim.errors import RunError
from fim.eval.cassette_hooks import with_cause
from fim.eval.cassettes import Cassette, CassetteMiss, tool_call, tool_key
from fim.tools.registry import Run, wrapping_tools
from fim.tools.view import prepare_view, view_of
from fim.types import Tool, ToolResult

log = logging.getLogger(__name__)

ORCHESTRATING = frozenset({"request_tools", "read_skill", "call_agent", "run_workflow"})
"""fim's own meta-tools that act only inside the run: loading tools or a skill's text
from the project, running a delegate or a workflow (whose calls come through here)."""

RECORD_HINT = (
    "`fim eval --record` records it; a cassette recorded before fim stored tool results "
    "holds model replies only, so a case calling a tool with effects misses until "
    "re-recorded"
)


class ToolTape:
    """One case run's tool calls (a repeat has its own tape over the shared cassette)."""

    def __init__(self, cassette: Cassette, *, active: bool = True) -> None:
        self.cassette = cassette
        self.active = active
        """False: the case's calls run for real (`--live`; replay of a case with no
        cassette, where only scripted models, reviewed like the agent, can ask for calls)."""
        self.seen: dict[str, int] = {}
        """How many times each (target, masked arguments) was called so far."""
        self.miss: str | None = None
        """The first call that could not be replayed, in words (the case's cassette miss)."""

    async def __call__(
        self, name: str, arguments: dict[str, Any], tool: Tool | None, run: Run
    ) -> ToolResult:
        if tool is not None and tool.name in ORCHESTRATING:
            return await run()
        target, target_args = await _target(name, arguments, tool)
        masker = self.cassette.masker
        call = tool_call(target, target_args, masker)
        occurrence = self.seen.get(call, 0)
        self.seen[call] = occurrence + 1
        key = tool_key(call, occurrence)
        code = code_of(tool)
        if self.cassette.mode == "record":
            result = await run()
            await self.cassette.store_tool(key, target, result, code)
            return result
        try:
            recorded = self.cassette.tool_result(key)
        except RunError as exc:  # a broken cassette: nothing runs, the case says why
            self.miss = self.miss or str(exc)
            return ToolResult(content=f"Error: {exc}", is_error=True)
        if recorded is not None and is_python(tool):
            changed = self._changed(key, name, code)
            if changed is not None:
                self.cassette.misses += 1
                self.miss = self.miss or f"cassette miss: {changed}"
                return ToolResult(content=f"Error: {changed}. Stop and answer.", is_error=True)
        if recorded is not None:
            self.cassette.hits += 1
            return recorded
        if tool is not None and (getattr(tool, "metadata", None) or {}).get("pure") is True:
            return await run()
        self.cassette.misses += 1
        shown = masker.text(target)
        problem = f"tool call {shown} was not recorded in {self.cassette.path.name}"
        text, hint = with_cause(self.cassette, f"cassette miss: {problem}", RECORD_HINT, shown)
        self.miss = self.miss or f"{text} ({hint})"
        return ToolResult(
            content=f"Error: {problem}; replay does not run it. Stop and answer.",
            is_error=True,
        )

    def _changed(self, key: str, name: str, code: dict[str, Any] | None) -> str | None:
        """Why the recorded result `key` of a project Python tool is not replayed (its
        source changed since recording), or None; a result recorded without the hash is
        replayed, and said once in the log."""
        stored = self.cassette.tools.get(key, {}).get("code")
        if not isinstance(stored, dict):
            global _UNPINNED_SAID
            if not _UNPINNED_SAID:
                _UNPINNED_SAID = True
                log.warning(
                    "%s holds results of project Python tools recorded before fim pinned "
                    "their source: replayed as recorded, not checked against the code now "
                    "(`fim eval --record` pins them)",
                    self.cassette.path.name,
                )
            return None
        now = None if code is None else self.cassette.masker.value(code)
        if now is not None and stored.get("sha256") == now["sha256"]:
            return None
        where = stored.get("file") or (now or {}).get("file") or "its module"
        was, is_ = stored.get("files"), (now or {}).get("files")
        if isinstance(was, dict) and isinstance(is_, dict):
            changed = sorted(f for f in was.keys() | is_.keys() if was.get(f) != is_.get(f))
            where = ", ".join(changed) or where  # the module it imports that changed
        return (
            f"tool '{name}' changed since recording ({where}): re-record with "
            "`fim eval --record`; replay does not run it"
        )

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Route the tool calls of this block (and the tasks it starts) through the tape."""
        if not self.active:
            yield
            return
        with wrapping_tools(self):
            yield

    def raise_miss(self) -> None:
        """Raise the case's cassette miss if a call could not be replayed."""
        if self.miss is not None:
            raise CassetteMiss(self.miss)


_UNPINNED_SAID = False
"""Whether the log said once that a cassette's Python tool results are not pinned."""


def is_python(tool: Tool | None) -> bool:
    """Whether `tool` is a project Python tool (`fim.tools.python_tools`: `module:function`
    of the hooks folder)."""
    return isinstance((getattr(tool, "metadata", None) or {}).get("python"), str)


def code_of(tool: Tool | None) -> dict[str, Any] | None:
    """`{"file": "hooks/orders.py", "sha256": ...}` of a project Python tool: the file of
    its module as the project spells it and a hash of its source as the snapshot pinned it
    (line endings as `\n`, so a Windows checkout hashes alike); None for any other tool,
    or when the module cannot be found."""
    if not is_python(tool):
        return None
    ref = str(getattr(tool, "metadata", {})["python"])
    function = _function(getattr(tool, "fn", None), ref.rpartition(":")[2])
    module = sys.modules.get(getattr(function, "__module__", None) or "")
    sources = _project_modules(module)
    if not sources:
        return None
    file = next(iter(sources))
    files = {f: _digest(source) for f, source in sources.items()}
    if len(files) == 1:
        return {"file": file, "sha256": files[file]}
    whole = hashlib.sha256("\0".join(f"{f}:{h}" for f, h in sorted(files.items())).encode())
    return {"file": file, "sha256": whole.hexdigest()[:16], "files": files}


def _digest(source: bytes) -> str:
    return hashlib.sha256(source.replace(b"\r\n", b"\n")).hexdigest()[:16]


def _project_modules(module: Any, most: int = 200) -> dict[str, bytes]:
    """file -> pinned source of `module` (first) and of every project module it reaches
    through its globals, transitively: a module it imported, or the module of a function
    or class it imported from one. A tool whose helper module changed replayed its old
    result (attack-58 F2). At most `most` modules."""
    found: dict[str, bytes] = {}
    todo = [module]
    while todo and len(found) < most:
        current = todo.pop(0)
        loader = getattr(getattr(current, "__spec__", None), "loader", None)
        file = getattr(loader, "key", None)
        source = getattr(getattr(loader, "pinned", None), "modules", {}).get(file)
        if not isinstance(file, str) or not isinstance(source, bytes) or file in found:
            continue
        found[file] = source
        for value in list(vars(current).values()):
            if isinstance(value, types.ModuleType):
                todo.append(value)
            elif isinstance(value, type | types.FunctionType):
                todo.append(sys.modules.get(value.__module__))
    return found


def _function(fn: Any, name: str, depth: int = 0) -> Any:
    """The project function `name` that the tool's `fn` calls: found among the closures
    `fim.tools.python_tools.build_tool` wraps it in, or None."""
    if fn is None or depth > 3:
        return None
    if getattr(fn, "__name__", None) == name and not str(fn.__module__).startswith("fim."):
        return fn
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            inner = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if callable(inner):
            found = _function(inner, name, depth + 1)
            if found is not None:
                return found
    return None


async def _target(
    name: str, arguments: dict[str, Any], tool: Tool | None
) -> tuple[str, dict[str, Any]]:
    """The call's real target and its own arguments, as hooks see it (`crm__delete_order`
    for the `connector` front); the call as made when the target cannot be told."""
    if tool is None:
        return name, arguments
    try:
        await prepare_view(tool, arguments)
        view = view_of(tool, arguments)
    except Exception:  # ViewError, or the view's own failure: the call keys as made
        return name, arguments
    return view.name, view.args


__all__ = ["ORCHESTRATING", "ToolTape"]
