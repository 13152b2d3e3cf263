"""A project module that fails to import, reported once, at its Python line.

Five agents listing `mytools:lookup_order` with a syntax error in hooks/mytools.py were five
problems, one at each agent's `tools:` entry, and `--format github` annotated the YAML, not
the Python line (newcomer-53 #16). `check_tools` (`fim.tools.python_tools`) hands each import
failure here; it becomes one problem at the line the import failed on (`hooks/mytools.py:
10:22`, `fim.build.project_modules.import_failure`'s `at`), else at the module's first line,
naming every agent and workflow node whose tool it keeps from loading.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fim.build.project_modules import ModuleLoadError, module_key
from fim.errors import Problem

_AT = re.compile(r", at (?P<path>[^\s,;]+\.py):(?P<line>\d+)(?::(?P<col>\d+))?$")
"""The project line `import_failure` ends its words with."""


@dataclass
class _Failure:
    detail: str
    hint: str | None
    refs: list[str] = field(default_factory=list)
    agents: list[str] = field(default_factory=list)
    workflows: list[str] = field(default_factory=list)

    def users(self) -> str:
        """`agents a, b and workflow w`."""
        parts = [
            f"{noun}{'s' if len(names) > 1 else ''} {', '.join(names)}"
            for noun, names in (("agent", self.agents), ("workflow", self.workflows))
            if names
        ]
        return " and ".join(parts)


@dataclass
class ModuleFailures:
    """The import failures of one `check_tools`, by module file."""

    folder: str
    """The hooks folder as the project names it (`hooks`)."""
    found: dict[str, _Failure] = field(default_factory=dict)

    def add(self, failure: ModuleLoadError | None, kind: str, name: str, ref: str) -> bool:
        """Keep `failure` of `ref`, used by the agent or workflow node `name`; False when
        it is not a module's import failure (then it is a problem at the entry)."""
        if failure is None or " failed to import: " not in failure.detail:
            return False  # not found, say: the entry's problem, as its name's check says
        module = ref.partition(":")[0].strip().removesuffix(".py")
        path = module_key(self.folder, module)
        kept = self.found.setdefault(path, _Failure(failure.detail, failure.hint))
        kept.refs += [ref] if ref not in kept.refs else []
        users = kept.agents if kind == "agent" else kept.workflows
        users += [name] if name not in users else []
        return True

    def problems(self) -> list[Problem]:
        """One problem per module, at the Python line when the failure names one."""
        found = []
        for path, failure in self.found.items():
            at = _AT.search(failure.detail)
            where, line, col = path, 1, 1
            detail = failure.detail
            if at is not None:
                where, line, col = at["path"], int(at["line"]), int(at["col"] or 1)
                detail = detail[: at.start()]
            refs = ", ".join(failure.refs)
            noun = "tool" if len(failure.refs) == 1 else "tools"
            message = f"{detail}; the {noun} {refs} of {failure.users()} cannot load"
            found.append(Problem(where, line, col, message, failure.hint))
        return found


__all__ = ["ModuleFailures"]
