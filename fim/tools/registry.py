"""ToolRegistry: the tools of one run, assembled per request.

The registry is the single place where a tool call is checked and executed: unknown names,
malformed JSON, schema violations, exceptions and timeouts all become observations written
for the model (what was wrong, what is valid, what to do next), never crashes.

`wrapping_tools(wrapper)` is the seam every call that reaches outside the process passes
(like `fim.llm.wrapping_models` for models): within it, and in the tasks it starts, each
call is `wrapper(name, arguments, tool, run)`, where `run()` runs it for real. `fim eval`
puts a case's cassette there, so replay returns recorded tool results instead of sending
what a committed file asks. A caller that runs a capability without a registry (a workflow
`database` node) goes through `through_seam` itself.
"""

from __future__ import annotations

import asyncio
import json
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar, cast

from fim.masking import clipped, known
from fim.project_frames import Raised, raised_fields
from fim.schema_check import (
    MAX_NESTING,
    nested_deeper,
    plainly_valid,
    validator,
    validator_problems,
)
from fim.startup_cost import one_off
from fim.tools import isolate
from fim.types import NO_SUCH_TOOL, Tool, ToolResult, ToolSpec

T = TypeVar("T")

Run = Callable[[], Awaitable[ToolResult]]
ToolWrapper = Callable[[str, dict[str, Any], "Tool | None", Run], Awaitable[ToolResult]]
"""`(name, arguments, tool, run)`: `tool` is None for a call with no Tool object (a
workflow's `database` node); `run()` makes the call for real."""

_TOOL_WRAPPER: ContextVar[ToolWrapper | None] = ContextVar("fim_tool_wrapper", default=None)


@contextmanager
def wrapping_tools(wrapper: ToolWrapper) -> Iterator[None]:
    """Within this block (and the tasks started in it), every tool call goes through
    `wrapper` instead of running directly."""
    token = _TOOL_WRAPPER.set(wrapper)
    try:
        yield
    finally:
        _TOOL_WRAPPER.reset(token)


async def through_seam(
    name: str, arguments: dict[str, Any], tool: Tool | None, run: Run
) -> ToolResult:
    """`run()`, or what the installed `wrapping_tools` wrapper makes of it."""
    wrapper = _TOOL_WRAPPER.get()
    if wrapper is None:
        return await run()
    return await wrapper(name, arguments, tool, run)


class ToolRegistry:
    """Tools by name, with an optional *active* subset (tool selection / request_tools)."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._active: set[str] | None = None
        self._validators: dict[str, Any] = {}
        for t in tools:
            self.add(t)

    # ------------------------------------------------------------------ contents

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"duplicate tool name '{tool.name}'")
        self._tools[tool.name] = tool

    def replace(self, tool: Tool) -> None:
        """Swap the tool of the same name for `tool` (a wrapper adding run-scoped
        behaviour); its active state is kept."""
        if tool.name not in self._tools:
            raise KeyError(tool.name)
        self._tools[tool.name] = tool
        self._validators.pop(tool.name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    # ------------------------------------------------------------------ selection

    def restrict(self, names: Iterable[str]) -> None:
        """Show the model only these tools; the rest stay loadable via `activate`."""
        self._active = {n for n in names if n in self._tools}

    def activate(self, names: Iterable[str]) -> list[str]:
        """Make more tools visible mid-run; returns the names that were newly added."""
        if self._active is None:
            return []
        added = [n for n in names if n in self._tools and n not in self._active]
        self._active.update(added)
        return added

    @property
    def active_names(self) -> list[str]:
        if self._active is None:
            return self.names
        return [n for n in self._tools if n in self._active]

    @property
    def inactive(self) -> list[Tool]:
        return [
            t for n, t in self._tools.items() if self._active is not None and n not in self._active
        ]

    def specs(self) -> list[ToolSpec]:
        return [_spec(self._tools[n]) for n in self.active_names]

    # ------------------------------------------------------------------ execution

    async def check(
        self, name: str, arguments: dict[str, Any], raw: str | None = None
    ) -> str | None:
        """Return a message for the model if the call is invalid, else None."""
        tool = self._tools.get(name)
        if tool is None:
            visible = ", ".join(self.active_names) or "none"
            return (
                f"{NO_SUCH_TOOL}'{name}'. Available tools: {visible}. "
                "Call one of these by its exact name."
            )
        if raw is not None:
            return (
                f"Error: the arguments for '{name}' were not valid JSON "
                f"({known().head(raw, 200)[0]!r}). "  # masked whole, then cut
                "Send the arguments as one JSON object matching the tool's parameters."
            )
        if getattr(tool, "untrusted_schema", False):  # a third party's (MCP, an OpenAPI spec)
            meta = tool.metadata  # one party per server or connector, whichever action
            errors = await isolate.schema_problems(
                arguments,
                tool.parameters,
                whose=f"the parameter schema of '{name}'",
                party=str(meta.get("server") or meta.get("connector") or name),
            )
        else:
            errors = self._schema_errors(tool, arguments)
        if errors:
            props = tool.parameters.get("properties", {})
            required = tool.parameters.get("required", [])
            valid = ", ".join(
                f"{k}{'' if k in required else '?'}: {v.get('type', 'any')}"
                for k, v in props.items()
            )
            return (
                f"Error: invalid arguments for '{name}': {'; '.join(errors)}. "
                f"Valid parameters: {{{valid}}}. Fix the arguments and call the tool again."
            )
        return None

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        raw: str | None = None,
        timeout: float | None = None,
        checked: bool = False,
    ) -> ToolResult:
        """Run a call. `checked`: the caller has just passed these very arguments through
        `check` (the engine does, before its hooks), so they are not validated twice."""
        if not checked:
            problem = await self.check(name, arguments, raw)
            if problem is not None:
                return ToolResult(content=problem, is_error=True)
        tool = self._tools[name]
        if _TOOL_WRAPPER.get() is not None:
            return await through_seam(
                name, arguments, tool, lambda: self._run(name, tool, arguments, timeout)
            )
        return await self._run(name, tool, arguments, timeout)

    async def _run(
        self, name: str, tool: Tool, arguments: dict[str, Any], timeout: float | None
    ) -> ToolResult:
        """Run a checked call for real: a failure or a timeout is an observation."""
        if getattr(tool, "own_deadline", False):
            timeout = None  # e.g. MCP calls: an idle timeout that progress extends, a hard cap
        when = None if timeout is None else asyncio.get_running_loop().time() + timeout
        deadline: list[asyncio.Timeout] = []  # armed only if the call suspends
        try:
            result = await _under(when, deadline, tool.run(**arguments))
        except TimeoutError as exc:
            if not (deadline and deadline[0].expired()):  # the tool's own: a plain failure
                return ToolResult(
                    content=f"Error: tool '{name}' failed: TimeoutError: {exc}", is_error=True
                )
            return ToolResult(
                content=f"Error: tool '{name}' timed out after {timeout:g}s. "
                "Try a smaller request or a different approach.",
                is_error=True,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a tool failure is an observation, never a crash
            return failed(name, exc)
        if isinstance(result, ToolResult):
            return _capped(result)
        if not isinstance(result, str):
            result = json.dumps(result, default=str, ensure_ascii=False)
        return _capped(ToolResult(content=result))

    def _schema_errors(self, tool: Tool, arguments: dict[str, Any]) -> list[str]:
        if plainly_valid(tool.parameters, arguments):
            return []  # certain without jsonschema; anything else it decides and words
        if nested_deeper(arguments):
            return [
                f"the arguments are nested more than {MAX_NESTING} levels deep; "
                "flatten the data or send less of it"
            ]
        checker = self._validators.get(tool.name)
        if checker is None:  # per name too: a tool may build its schema on every access
            with one_off():  # the validator's load: not the call's own time (newcomer-53 #13)
                checker = self._validators[tool.name] = validator(tool.parameters)
        return validator_problems(checker, arguments)


def warm_up() -> None:
    """Load what the first call with arguments that are not plainly valid waits for (the
    JSON Schema validator, a few hundred ms): `fim serve` does at start-up, so no served
    run's call pays it (newcomer-53 #13). A CLI run does not: its call reports the wait as
    `startup_ms`, apart from its own time."""
    validator({"type": "object"})


def failed(name: str, exc: BaseException, where: Raised | None = None) -> ToolResult:
    """The observation of a tool that raised: `Error: tool 'x' failed: KeyError: 2`, all
    the model reads. `where` (a project's Python tool: its trimmed traceback) goes only into
    the result's metadata, for the run's `tool_result` event (`fim.project_frames`)."""
    return ToolResult(
        content=f"Error: tool '{name}' failed: {type(exc).__name__}: {exc}",
        is_error=True,
        metadata=raised_fields(where),
    )


async def _under(when: float | None, armed: list[asyncio.Timeout], call: Awaitable[T]) -> T:
    """`call` run to its end under a deadline at loop time `when` (None: none), its first
    step taken at once: a tool that finishes without ever suspending (the calculator, most
    builtins) cannot be interrupted by an asyncio deadline, so arming one (a timer handle,
    its cancellation, a Timeout object: a third of such a call's cost) would change
    nothing. A call that suspends continues under the deadline, which was fixed when the
    call began; the Timeout armed is appended to `armed` (the caller asks it whether it
    expired)."""
    if not isinstance(call, types.CoroutineType):  # another awaitable: the plain way
        armed.append(asyncio.timeout_at(when))
        async with armed[0]:
            return await call
    try:
        pending = call.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    armed.append(asyncio.timeout_at(when))
    async with armed[0]:
        return cast(T, await _resume(call, pending))


@types.coroutine
def _resume(call: Coroutine[Any, Any, Any], pending: Any) -> Generator[Any, Any, Any]:
    """Drive the rest of a coroutine already stepped once, as `await` would have: what it
    yields goes to the task, what the task sends or throws (a cancellation) goes to it."""
    while True:
        try:
            sent = yield pending
        except BaseException as exc:  # thrown in by the task: the coroutine decides
            try:
                pending = call.throw(exc)
            except StopIteration as done:
                return done.value
        else:
            try:
                pending = call.send(sent)
            except StopIteration as done:
                return done.value


_SPECS: dict[int, tuple[Tool, str, str, dict[str, Any], ToolSpec]] = {}
"""The ToolSpec of each tool object, shared by every run: building one validates (copies)
the whole parameter schema, and the same builtin or declared tool is shown on every model
call of every run. Keyed by identity and rebuilt when the tool's fields are replaced."""


def _spec(tool: Tool) -> ToolSpec:
    cached = _SPECS.get(id(tool))
    if cached is not None:
        held, name, description, parameters, spec = cached
        if (
            held is tool
            and name == tool.name
            and description == tool.description
            and parameters is tool.parameters
        ):
            return spec
    spec = ToolSpec(name=tool.name, description=tool.description, parameters=tool.parameters)
    if len(_SPECS) > 4096:
        _SPECS.clear()
    _SPECS[id(tool)] = (tool, tool.name, tool.description, tool.parameters, spec)
    return spec


MAX_OBSERVATION_CHARS = 400_000
"""The most of one tool result that goes on (about 100k tokens, more than one call should
ever put before a model). Everything after a result runs on the event loop, for each run
of the server: masking, token counting (~0.2 s a megabyte), the events and the store. A
database result of 8 MB or a server's huge reply is cut here, head and tail kept, each
masked before it is cut (`Masker.head`, `Masker.tail`: only the kept parts are masked)."""


def _capped(result: ToolResult) -> ToolResult:
    if len(result.content) <= MAX_OBSERVATION_CHARS:
        return result
    return result.model_copy(update={"content": clipped(result.content, MAX_OBSERVATION_CHARS)})
