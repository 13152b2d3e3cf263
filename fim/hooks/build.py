"""From an agent's `hooks:` declarations to a runnable chain, and the compile-time check.

Building and checking share one path (`resolve` + `instantiate`), so whatever `fim
validate` accepts is exactly what a run builds. A declaration that cannot be built at run
time becomes a `BrokenHook` that blocks everything, the session included: an agent whose
guard is broken does not run unguarded.
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import ValidationError

from fim.config.schema import HookSpec
from fim.errors import Problem
from fim.hooks import builtin
from fim.hooks.base import POINTS, BaseHook, HookBuildError, compile_matcher
from fim.hooks.targets import hook_targets, unmatched
from fim.masking import known
from fim.types import HookContext, HookPoint, HookResult

if TYPE_CHECKING:
    from fim.build.snapshot import Locate, Snapshot
    from fim.config.yamlio import Path_
    from fim.events import HookRunner
    from fim.run.services import RunContext

_OVERRIDABLE = ("event", "matcher", "priority", "timeout", "optional")
_MAX_REF_DEPTH = 5


class BrokenHook(BaseHook):
    """Stands in for a hook that could not be built; blocks every point, first."""

    point: ClassVar[HookPoint] = "PreToolUse"
    also: ClassVar[tuple[HookPoint, ...]] = ("SessionStart", "PostToolUse")
    priority = -(10**9)

    def __init__(self, name: str, problem: str) -> None:
        super().__init__()
        self.name = name
        self.problem = problem

    async def __call__(self, context: HookContext) -> HookResult:
        return HookResult(
            allow=False,
            error=f"hook '{self.name}' could not be built ({self.problem}), so nothing it "
            "guards may run (hooks fail closed); the project's hooks need fixing "
            "(run `fim validate`)",
        )


def display_name(spec: HookSpec) -> str:
    """A hook's name in events, messages and the `fim_hook_blocks` label. A command hook's
    is its command, interpolated at load (the text as written is not kept): masked whole
    before it is squeezed onto one line and cut (`Masker.head`), since a cut falling
    inside a `${VAR}` value leaves a piece of it that no mask matches any more."""
    if spec.ref:
        return spec.ref
    if spec.use:
        return spec.use
    if spec.python:
        return spec.python
    masker = known()
    command = " ".join(masker.text(spec.command or "").split())
    if len(command) <= 60:
        return "command: " + command
    return "command: " + masker.head(command, 57)[0] + "..."


def resolve(spec: HookSpec, snapshot: Snapshot, depth: int = 0) -> HookSpec:
    """Follow `ref:` to the declaration in hooks/*.yaml; fields set on the agent's entry
    (event, matcher, priority, timeout) override it and its `with:` options merge in."""
    if spec.ref is None:
        return spec
    if depth >= _MAX_REF_DEPTH:
        raise HookBuildError(
            f"hook ref '{spec.ref}' refers in a loop",
            hint=f"a ref chain is longer than {_MAX_REF_DEPTH}",
        )
    decl = snapshot.hooks.get(spec.ref)
    if decl is None:
        names = sorted(snapshot.hooks)
        close = difflib.get_close_matches(spec.ref, names, n=1)
        raise HookBuildError(
            f"unknown hook ref '{spec.ref}'",
            hint=(f"did you mean '{close[0]}'? " if close else "")
            + f"declared in hooks/: {', '.join(names) or 'none'}",
        )
    data = decl.model_dump(by_alias=True, exclude_unset=True, exclude={"name", "description"})
    data.update({f: getattr(spec, f) for f in _OVERRIDABLE if f in spec.model_fields_set})
    data["with"] = {**decl.with_, **spec.with_}
    return resolve(HookSpec.model_validate(data), snapshot, depth + 1)


def _options_error(name: str, cls: type[BaseHook], exc: ValidationError) -> HookBuildError:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'with'}: {err['msg']}" for err in exc.errors()
    )
    options = cls.Options
    valid = ""
    if options is not None:
        valid = ", ".join(f"{field.alias or key}" for key, field in options.model_fields.items())
    return HookBuildError(
        f"bad options for hook '{name}': {problems}",
        hint=f"valid options under with: {valid or 'none'}",
    )


def _construct(name: str, cls: type[BaseHook], args: dict[str, Any], **extra: Any) -> BaseHook:
    try:
        return cls(**extra, **args)
    except ValidationError as exc:
        raise _options_error(name, cls, exc) from None
    except TypeError as exc:
        raise HookBuildError(f"bad options for hook '{name}': {exc}") from None
    except Exception as exc:
        raise HookBuildError(
            f"hook '{name}' failed to start: {type(exc).__name__}: {exc}"
        ) from None


def instantiate(spec: HookSpec, snapshot: Snapshot, name: str | None = None) -> BaseHook:
    """Build the hook object of a resolved (ref-free) declaration, or raise HookBuildError."""
    name = name or display_name(spec)
    if spec.matcher is not None:
        try:
            compile_matcher(spec.matcher)
        except re.error as exc:
            raise HookBuildError(
                f"hook '{name}' has an invalid regex matcher {spec.matcher!r}: {exc}"
            ) from None
    if spec.command is not None:
        if spec.event is None:
            raise HookBuildError(
                f"command hook '{name}' needs an event",
                hint=f"add event: one of {', '.join(POINTS)}",
            )
        # deferred: loading fim.hooks.command costs a few ms
        from fim.hooks.command import CommandHook

        hook = _construct(
            name, CommandHook, spec.with_, command=spec.command, event=spec.event, env=spec.env
        )
    else:
        if spec.use is not None:
            cls = builtin.load(spec.use)
            kind = f"builtin hook '{spec.use}'"
        else:
            # deferred: loading fim.hooks.python_hooks costs a few ms
            from fim.hooks.python_hooks import load_class

            cls = load_class(snapshot, spec.python or "")
            kind = f"class '{spec.python}'"
        points = (cls.point, *cls.also)
        if spec.event is not None and spec.event not in points:
            raise HookBuildError(
                f"{kind} is a {cls.point} hook, but the declaration says event: {spec.event}",
                hint=f"remove event: or set it to {cls.point}",
            )
        hook = _construct(name, cls, spec.with_)
    hook.name = name
    fields = spec.model_fields_set
    if "matcher" in fields or spec.matcher is not None:
        hook.set_matcher(spec.matcher)
    if "priority" in fields:
        hook.priority = spec.priority
    hook.optional = spec.optional
    if "timeout" in fields or spec.command is not None:
        hook.timeout = spec.timeout
    return hook


READ_ONLY_GUARD = "readonly_guard (read_only: true)"
"""Name of the guard every run of a read-only agent or project gets without declaring it."""


def _read_only_guard(ctx: RunContext) -> BaseHook | None:
    """`readonly_guard` for a run whose agent or project says `read_only: true`. The setting
    is a guarantee, not a hint to a hook the agent may forget to declare, and it holds in
    `fim eval` too (which turns the agent's own hooks off)."""
    if not (ctx.agent.read_only or ctx.snapshot.project.read_only):
        return None
    guard = instantiate(HookSpec(use="readonly_guard"), ctx.snapshot, READ_ONLY_GUARD)
    guard.run_context = ctx
    return guard


def read_only_chain(ctx: RunContext) -> HookRunner | None:
    """Only the read-only guard, for a run with no hook chain of its own (a workflow run
    on its own in a read-only project); None when nothing is read-only."""
    guard = _read_only_guard(ctx)
    if guard is None:
        return None
    # deferred: loading fim.events costs tens of ms
    from fim.hooks.runner import HookChain

    return HookChain([guard], mask=ctx.snapshot.mask)


def build_hooks(ctx: RunContext) -> HookRunner:
    """The hook chain of one run of `ctx.agent`; with hooks off (`ctx.hooks_enabled`, the
    eval path's one switch), only the read-only guard of a read-only agent or project."""
    # deferred: loading fim.events costs tens of ms
    from fim.hooks.runner import HookChain

    guard = _read_only_guard(ctx)
    if not ctx.hooks_enabled:
        if guard is not None:
            return HookChain([guard], mask=ctx.snapshot.mask)
        # deferred: loading fim.events costs tens of ms
        from fim.events import NoHooks

        return NoHooks()
    hooks: list[BaseHook] = []
    for spec in ctx.agent.hooks:
        name = display_name(spec)
        try:
            hook = instantiate(resolve(spec, ctx.snapshot), ctx.snapshot, name)
        except HookBuildError as exc:
            hook = BrokenHook(name, str(exc))
        except Exception as exc:
            hook = BrokenHook(name, f"{type(exc).__name__}: {exc}")
        hook.run_context = ctx
        hooks.append(hook)
    if guard is not None and not any(
        type(h) is type(guard) and h.matcher in (None, "", "*") for h in hooks
    ):
        hooks.append(guard)  # unless the agent declares it for every tool already
    return HookChain(hooks, mask=ctx.snapshot.mask)


def check_hooks(snapshot: Snapshot, locate: Locate | None = None) -> list[Problem]:
    """Every hook declaration that would not build, as problems for `fim validate`, each
    at the hook's own entry in its file."""
    problems: list[Problem] = []
    where = locate or snapshot.source

    def check(kind: str, owner: str, label: str, spec: HookSpec, path: Path_ = ()) -> None:
        hint: str | None = None
        try:
            hook = instantiate(resolve(spec, snapshot), snapshot, display_name(spec))
            agent = snapshot.agents.get(owner) if kind == "agent" else None
            if agent is None or hook.points == ("SessionStart",):
                return
            if hook.matcher is None or hook.matcher.strip() in ("", "*"):
                return  # matches every tool: no need to list the agent's (unmatched says None)
            hint = unmatched(hook.matcher, hook_targets(snapshot, agent))
            if hint is None:
                return
            message = f"matcher {hook.matcher!r} matches no tool this agent can call"
        except HookBuildError as exc:
            message, hint = exc.message, exc.hint
        except Exception as exc:
            message = f"cannot build hook: {type(exc).__name__}: {exc}"
        src = where(kind, owner, path)  # positions recompose the YAML: only on a problem
        problems.append(Problem(src.path, src.line, src.column, f"{label}: {message}", hint))

    for agent_name, agent in snapshot.agents.items():
        for index, spec in enumerate(agent.hooks):
            label = f"agent '{agent_name}' hooks[{index}]"
            check("agent", agent_name, label, spec, ("hooks", index))
    for hook_name, decl in snapshot.hooks.items():
        data = decl.model_dump(by_alias=True, exclude_unset=True, exclude={"name", "description"})
        check("hook", hook_name, f"hook '{hook_name}'", HookSpec.model_validate(data))
    return problems


__all__ = [
    "READ_ONLY_GUARD",
    "BrokenHook",
    "build_hooks",
    "check_hooks",
    "instantiate",
    "read_only_chain",
    "resolve",
]
