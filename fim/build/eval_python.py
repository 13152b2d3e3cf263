"""`python: module:function` eval assertions: finding the function, for `fim validate` and
for the eval that calls it.

The function lives in a file of the project's hooks folder, loaded the way python tools and
`python:` hooks are (`fim.hooks.python_hooks.load_module`: from the bytes the snapshot
pinned, one module object per pinned content). That loader sits a layer above, so it is
handed in, as `fim.tools.python_tools` is handed it. `fim validate` imports each module once
and checks that the function exists and can be called as `function(output, context)`: a
misspelt name found only after the model was paid for is the failure this check exists to
prevent.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from fim.build.project_modules import LoadModule, ModuleLoadError, functions_of, project_module
from fim.config.problems import suggest
from fim.config.schema.evals import PythonSpec
from fim.errors import Problem

if TYPE_CHECKING:
    from fim.build.snapshot import Locate, Snapshot
    from fim.config.schema import EvalSuite


Where = tuple[str | int, ...]


class PythonAssertionError(Exception):
    """Why a `python:` assertion's function cannot be used: a message and a hint."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def resolve(snapshot: Snapshot, ref: str, load_module: LoadModule) -> Callable[..., Any]:
    """The function `ref` (`module:function`) names in the project's hooks folder, checked
    to take `(output, context)`; raises PythonAssertionError."""
    module_name, _, name = ref.partition(":")
    folder = snapshot.project.paths.hooks
    try:
        module = project_module(snapshot, module_name, load_module)
    except ModuleLoadError as exc:
        raise PythonAssertionError(f"cannot import '{ref}': {exc.detail}", exc.hint) from None
    found = functions_of(module)
    fn = getattr(module, name, None)
    # a public function the module defines: not a dunder (`__setattr__` let a case rebind
    # the module's globals, attack-26 #2) nor what it imports (`from subprocess import run`)
    if name not in found or not callable(fn):
        raise PythonAssertionError(
            f"cannot import '{ref}': {folder}/{module_name}.py has no function '{name}'",
            suggest(name, found, f"functions in {module_name}.py") or "it has no functions",
        )
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise PythonAssertionError(
            f"'{ref}' cannot be called as {name}(output, context)",
            f"define it as `def {name}(output: str, context: dict) -> bool | float | "
            "tuple[bool, str]`",
        ) from None
    except ValueError:  # a builtin without a signature: it is called, and fails if it must
        pass
    return fn


def python_assertions(suite: EvalSuite) -> Iterator[tuple[Where, PythonSpec]]:
    """Every `python:` assertion of a suite with where it is written: a case's own at the
    case, `default_expect`'s once, where the suite writes them."""
    shared = len(suite.default_expect)
    for j, assertion in enumerate(suite.default_expect):
        if assertion.python is not None:
            yield ("default_expect", j, "python"), assertion.python
    for i, case in enumerate(suite.cases):
        own = case.expect[: len(case.expect) - shared] if shared else case.expect
        for j, assertion in enumerate(own):
            if assertion.python is not None:
                yield ("cases", i, "expect", j, "python"), assertion.python


def check_python_assertions(
    snapshot: Snapshot, locate: Locate, load_module: LoadModule
) -> list[Problem]:
    """Every `python:` assertion's function imported and checked once, as problems at the
    assertion (for a CSV case, at its cell)."""
    problems: list[Problem] = []
    seen: dict[str, PythonAssertionError | None] = {}
    for suite in snapshot.evals.values():
        for where, spec in python_assertions(suite):
            if spec.function not in seen:
                try:
                    resolve(snapshot, spec.function, load_module)
                    seen[spec.function] = None
                except PythonAssertionError as exc:
                    seen[spec.function] = exc
            error = seen[spec.function]
            if error is not None:
                src = locate("eval", suite.name, where)
                problems.append(
                    Problem(src.path, src.line, src.column, f"python: {error.message}", error.hint)
                )
    return problems
