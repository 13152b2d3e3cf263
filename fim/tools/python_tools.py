"""A project's own Python functions as tools: `tools: [mytools:add]` in an agent file.

`mytools` is a file of the project's hooks folder (`hooks/mytools.py`), loaded the way
`python:` hooks and `output_schema: module:Class` are: from the bytes the snapshot pinned at
compile, never from the disk, one module object per pinned content
(`fim.hooks.python_hooks.load_module`). That loader sits one
layer above the tools, so its callers hand it in: the compile's check (`check_tools`, run
by `fim validate`) and the run's provider (`fim.run.project_tools`).

What a function becomes, so that nothing about it is written twice:
- its name is the function's own name (`add`), what the model calls and hook matchers and
  `tool_called` assertions meet, as in ADK, LangGraph and Claude Code; `fim validate`
  refuses one named like a builtin, a meta-tool or another tool of the agent;
- its description is the first paragraph of its docstring (required: the model picks
  tools by it);
- its parameters are the JSON Schema pydantic derives from the type hints (a model built
  from the signature), so every parameter must be annotated; each one's description is
  its annotation's (`Annotated[str, Field(description=...)]`), else the docstring's
  (Google `Args:`, NumPy `Parameters`, Sphinx `:param x:`, as ADK and openai-agents read
  them); the context those frameworks inject (`tool_context`, `ctx`) has no counterpart,
  and a parameter for it is refused as such;
- a call validates the arguments with that same model before the function runs (a bad
  argument is an observation for the model), runs a sync function in a worker thread
  (never on the event loop) and awaits an async one; the result is text: a `str` as it
  is, anything else as JSON; an exception is the registry's error observation; what it
  prints is logged under its name, never written to fim's stdout (`fim.stdout_guard`);
- hooks see it as any builtin: its name, its arguments and `access`. fim cannot know what
  a function does, so it is `access: write` (blocked for a read-only agent or project by
  `readonly_guard`) unless it is marked `@fim.tools.read_only`.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import to_json

from fim.build.builtin_names import is_python_tool, tool_name
from fim.build.project_modules import LoadModule, ModuleLoadError, functions_of, project_module
from fim.errors import Problem, RunError
from fim.project_frames import Raised, described
from fim.stdout_guard import calling
from fim.threads import own_thread
from fim.tools.base import FunctionTool
from fim.tools.docstrings import describe, first_paragraph, parameter_docs
from fim.tools.registry import failed
from fim.types import ToolResult

if TYPE_CHECKING:
    from fim.build.snapshot import Locate, Snapshot

F = TypeVar("F", bound=Callable[..., Any])

READ_ONLY_ATTRIBUTE = "__fim_read_only__"
CATEGORY = "python"


def read_only(fn: F) -> F:
    """Mark a tool function as one that only reads (`access: read`), so a read-only agent
    or project may call it. Unmarked functions are treated as writes: fim cannot tell."""
    setattr(fn, READ_ONLY_ATTRIBUTE, True)
    return fn


class PythonToolError(Exception):
    """A `module:function` entry that cannot become a tool: a problem for `fim validate`,
    a RunError for a run."""

    def __init__(
        self, message: str, hint: str | None = None, failure: ModuleLoadError | None = None
    ) -> None:
        self.message, self.hint, self.failure = message, hint, failure  # failure: the import's
        super().__init__(message + (f" ({hint})" if hint else ""))


class _Raised(Exception):
    """The function raised `exc` in its worker thread; `where`: its trimmed traceback."""

    def __init__(self, exc: Exception, where: Raised | None) -> None:
        super().__init__(str(exc))
        self.exc = exc
        self.where = where


class _BadArguments(Exception):
    """The model's arguments failed the function's types: told to the model, not raised."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def split_ref(ref: str) -> tuple[str, str]:
    module, _, function = ref.partition(":")
    module, function = module.strip().removesuffix(".py"), function.strip()
    if not module or not function.isidentifier():
        raise PythonToolError(
            f"invalid tool '{ref}'", "write module:function, e.g. mytools:add for def add(...)"
        )
    return module, function


# ---------------------------------------------------------------------- building


CONTEXT_PARAMETERS = frozenset({"tool_context", "ctx", "context", "run_context"})
"""Names ADK (`tool_context`) and openai-agents (`ctx`, `context`, `run_context`) give the
context they pass into a tool, which fim has no equivalent of: refused when unannotated."""

CONTEXT_TYPES = frozenset({"ToolContext", "RunContextWrapper"})
"""The types of those contexts (ADK's, openai-agents'): refused under any name."""


def _injected(parameter: inspect.Parameter) -> bool:
    """Whether `parameter` is a context another framework injects (`tool_context:
    ToolContext`, `ctx: RunContextWrapper[Any]`, or `tool_context` with its import gone)."""
    annotation = parameter.annotation
    if annotation is parameter.empty:
        return parameter.name in CONTEXT_PARAMETERS
    if isinstance(annotation, str):  # `from __future__ import annotations`
        spelled = annotation
    else:
        spelled = str(getattr(typing.get_origin(annotation) or annotation, "__name__", ""))
    return spelled.partition("[")[0].rpartition(".")[2].strip("'\" ") in CONTEXT_TYPES


def _arguments_model(fn: Callable[..., Any], ref: str) -> tuple[type[BaseModel], list[str]]:
    """A pydantic model of `fn`'s parameters (fields `p0`, `p1`... aliased to the
    parameter names, so a parameter may be called `json` or `_x`), and those names."""
    signature = inspect.signature(fn)
    odd = [
        f"{'*' if p.kind is p.VAR_POSITIONAL else '**' if p.kind is p.VAR_KEYWORD else ''}{p.name}"
        for p in signature.parameters.values()
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY)
    ]
    if odd:
        raise PythonToolError(
            f"'{ref}' has parameters a tool cannot be given: {', '.join(odd)}",
            "a tool's arguments are named: use plain parameters (a list parameter instead "
            "of *args, no positional-only '/')",
        )
    injected = [p.name for p in signature.parameters.values() if _injected(p)]
    if injected:
        raise PythonToolError(
            f"'{ref}' has a parameter for an injected context: {', '.join(injected)}",
            "ADK passes a ToolContext and openai-agents a RunContextWrapper into a tool; fim "
            "injects no context, and the model cannot fill one: remove the parameter",
        )
    bare = [p.name for p in signature.parameters.values() if p.annotation is p.empty]
    if bare:
        raise PythonToolError(
            f"'{ref}' has parameters without a type annotation: {', '.join(bare)}",
            f"annotate each one, e.g. {bare[0]}: int; the tool's JSON Schema comes from them",
        )
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # a name only imported under TYPE_CHECKING, a typo
        raise PythonToolError(
            f"cannot resolve the type hints of '{ref}': {type(exc).__name__}: {exc}",
            "import every type its annotations name at module level",
        ) from None
    names = list(signature.parameters)
    fields: dict[str, Any] = {}
    for i, (name, parameter) in enumerate(signature.parameters.items()):
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[f"p{i}"] = (hints[name], Field(default, alias=name))
    config = ConfigDict(extra="forbid", populate_by_name=False, arbitrary_types_allowed=False)
    try:
        model = create_model(tool_name(ref), __config__=config, **fields)
    except Exception as exc:
        raise PythonToolError(
            f"cannot derive a JSON Schema from the type hints of '{ref}': {exc}",
            "use JSON types: str, int, float, bool, lists, dicts, Literal, pydantic models",
        ) from None
    return model, names


def _schema(model: type[BaseModel], ref: str) -> dict[str, Any]:
    try:
        schema = model.model_json_schema(by_alias=True)
    except Exception as exc:
        raise PythonToolError(
            f"cannot derive a JSON Schema from the type hints of '{ref}': {exc}",
            "use JSON types: str, int, float, bool, lists, dicts, Literal, pydantic models",
        ) from None
    schema.pop("title", None)
    return schema


def _wording(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(x) for x in err['loc']) or 'arguments'}: {err['msg']}"
        for err in exc.errors(include_url=False)
    )


def _text(result: Any) -> str | ToolResult:
    if isinstance(result, str | ToolResult):
        return result
    return to_json(result, fallback=str).decode()


def build_tool(fn: Any, ref: str, root: Path | None = None) -> FunctionTool:
    """The tool of the function `fn` named by `ref` (raises PythonToolError). `root`: the
    project's, whose frames an exception's traceback keeps (`fim.project_frames`)."""
    if isinstance(fn, type) or not callable(fn):
        raise PythonToolError(
            f"'{ref}' is not a function ({type(fn).__name__})",
            "name a def or async def of the module",
        )
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise PythonToolError(
            f"'{ref}' is a generator", "return the whole result instead of yielding parts"
        )
    description = first_paragraph(inspect.getdoc(fn))
    try:
        model, names = _arguments_model(fn, ref)
    except PythonToolError as unannotated:
        if description:
            raise
        also = unannotated.message.removeprefix(f"'{ref}' ")
        raise PythonToolError(  # both at once: the user fixes them in one edit
            f"'{ref}' has no docstring, and {also}",
            "its docstring's first paragraph is the tool's description, which the model "
            f"picks tools by; {unannotated.hint or 'annotate each parameter'}",
        ) from None
    if not description:
        raise PythonToolError(
            f"'{ref}' has no docstring",
            "its first paragraph is the tool's description, which the model picks tools by",
        )
    parameters = _schema(model, ref)
    describe(parameters, parameter_docs(inspect.getdoc(fn)))
    name = tool_name(ref)
    is_async = inspect.iscoroutinefunction(fn)

    def bind(arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            values = model.model_validate(arguments)
        except ValidationError as exc:
            raise _BadArguments(_wording(exc)) from None
        return {n: getattr(values, f"p{i}") for i, n in enumerate(names)}

    def call_sync(arguments: dict[str, Any]) -> Any:
        values = bind(arguments)
        try:
            return fn(**values)
        except Exception as exc:  # described in this thread, where it was caught: text leaves
            raise _Raised(exc, described(exc, root)) from None

    async def run(**arguments: Any) -> str | ToolResult:
        try:
            with calling(name):  # what it prints goes to the log, never fim's stdout
                result = await call(arguments)
        except _BadArguments as bad:
            return ToolResult(
                content=f"Error: invalid arguments for '{name}': {bad.text}. Fix the "
                "arguments and call the tool again.",
                is_error=True,
            )
        except _Raised as raised:
            return failed(name, raised.exc, raised.where)
        except Exception as exc:  # an async function's (or its awaitable's), on the loop
            return failed(name, exc, described(exc, root))
        return _text(result)

    async def call(arguments: dict[str, Any]) -> Any:
        if is_async:
            return await fn(**bind(arguments))
        # the function and its argument validators may block: a thread of its own
        result = await own_thread(call_sync, arguments)
        if inspect.isawaitable(result):
            result = await result
        return result

    access = "read" if getattr(fn, READ_ONLY_ATTRIBUTE, False) else "write"
    return FunctionTool(
        name,
        description,
        parameters,
        run,
        CATEGORY,
        {"python": ref, "access": access},
    )


# ---------------------------------------------------------------------- resolving

_BUILT: dict[tuple[int, str], tuple[Any, FunctionTool]] = {}
"""The tool of each (function object, ref): the loader hands back the same module object
for the same pinned files, so a run reuses the tool `fim validate` (or the
previous run) built instead of deriving its schema again."""


def resolve(snapshot: Snapshot, ref: str, load_module: LoadModule) -> FunctionTool:
    """The tool `ref` names in `snapshot`'s project (raises PythonToolError)."""
    module_name, function = split_ref(ref)
    folder = snapshot.project.paths.hooks
    try:
        module = project_module(snapshot, module_name, load_module)
    except ModuleLoadError as exc:
        hint = f"; {exc.hint}" if exc.hint else ""
        raise PythonToolError(f"cannot import '{ref}'", exc.detail + hint, exc) from None
    try:  # a module `__getattr__` or a descriptor runs project code here
        fn = getattr(module, function, None)
    except Exception as exc:
        raise PythonToolError(
            f"cannot import '{ref}'",
            f"looking up '{function}' in {folder}/{module_name}.py raised "
            f"{type(exc).__name__}: {exc}",
        ) from None
    if fn is None:
        found = functions_of(module)
        raise PythonToolError(
            f"cannot import '{ref}'",
            f"{folder}/{module_name}.py has no function '{function}'; functions in it: "
            f"{', '.join(found) or 'none'}",
        )
    key = (id(fn), ref)
    cached = _BUILT.get(key)
    if cached is not None and cached[0] is fn:
        return cached[1]
    try:
        built = build_tool(fn, ref, Path(snapshot.root))
    except PythonToolError:
        raise
    except Exception as exc:  # its signature, annotations or docstring run project code
        raise PythonToolError(
            f"cannot build the tool '{ref}': {type(exc).__name__}: {exc}",
            "a tool is a plain def or async def with annotated parameters and a docstring",
        ) from None
    if len(_BUILT) >= 1024:
        _BUILT.clear()
    _BUILT[key] = (fn, built)
    return built


def refs_of(tools: list[str]) -> list[str]:
    """The `module:function` entries of an agent's `tools:`, each once, in order."""
    return [t for t in dict.fromkeys(tools) if is_python_tool(t)]


def load_tools(snapshot: Snapshot, agent: Any, load_module: LoadModule) -> list[FunctionTool]:
    """The function tools of `agent` for a run; one that cannot be built fails the run
    with what `fim validate` would have said."""
    tools = []
    for ref in refs_of(agent.tools):
        try:
            tools.append(resolve(snapshot, ref, load_module))
        except PythonToolError as exc:
            src = snapshot.source("agent", agent.name)
            raise RunError(f"{src.path}: tools: {exc.message}", hint=exc.hint) from None
    return tools


def check_tools(snapshot: Snapshot, locate: Locate, load_module: LoadModule) -> list[Problem]:
    """Every `module:function` tool of every agent and of every workflow `tool` node
    imported and built once, as problems at the entry in its file (the names were checked
    before, without importing); a module that fails to import is one problem, at its line
    (`fim.tools.module_failures`)."""
    # deferred: the workflow checks load the config schema, which a hooks module that
    # imports `fim.tools.read_only` need not pay for
    from fim.build.workflow_checks import python_tool_nodes
    from fim.tools.module_failures import ModuleFailures

    uses: list[tuple[str, str, tuple[str | int, ...], str, str]] = [
        ("workflow", w, ("nodes", n, "tool"), ref, "") for w, n, ref in python_tool_nodes(snapshot)
    ]
    for agent in snapshot.agents.values():
        tools = [(i, ref) for i, ref in enumerate(agent.tools) if is_python_tool(ref)]
        uses += [("agent", agent.name, ("tools", i), ref, "tools: ") for i, ref in tools]
    failures, problems = ModuleFailures(snapshot.project.paths.hooks), []
    for kind, name, path, ref, prefix in uses:
        try:
            resolve(snapshot, ref, load_module)
        except PythonToolError as exc:
            if not failures.add(exc.failure, kind, name, ref):
                src = locate(kind, name, path)
                message = prefix + exc.message
                problems.append(Problem(src.path, src.line, src.column, message, exc.hint))
    return problems + failures.problems()


__all__ = [
    "PythonToolError",
    "build_tool",
    "check_tools",
    "load_tools",
    "read_only",
    "refs_of",
    "resolve",
]
