"""The import graph of ``fim`` is the architecture: this test is its documentation.

Every ``import`` in every module counts, including the ones inside functions (a
function-level import hides a cycle from Python but not from a reader). Imports under
``if TYPE_CHECKING:`` never run and are left out. The graph is read statically with
``ast`` (fast, no interpreter per module); one test then imports every module once.

``LAYERS`` lists the rooms from the bottom up. A module may import a module of its own
layer or of a lower one, never of a higher one; and no set of modules may import each
other in a circle. A room is named by a module prefix; the longest prefix wins, so a
single module can sit on another floor than its package (``fim.run.services``).
"""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "fim"

# (layer, prefixes, why it sits there) — lowest first.
LAYERS: list[tuple[int, tuple[str, ...], str]] = [
    (
        0,
        (
            "fim",
            "fim.errors",
            "fim.types",
            "fim.events",
            "fim.masking",
            "fim.structured",
            "fim.locks",
            "fim.private",
            "fim.retries",
            "fim.schema_check",
            "fim.json_paths",
        ),
        "vocabulary every layer speaks: problems, messages, events, and the one policy for "
        "masking, locks, retries, JSON Schema checks, JSONPath and fim's private folder",
    ),
    (0, ("fim.observe",), "tracing and metrics: every layer reports into them"),
    (0, ("fim.run.discovery",), "finds modules in a package; used by compile and tools"),
    (
        0,
        ("fim.run.tokens",),
        "token counting: the prompt view, budgets and scripted models' usage count alike",
    ),
    (1, ("fim.config",), "load and validate the YAML project (schema, files, loader)"),
    (
        1,
        ("fim.workflows.node_types",),
        "workflow node types, one file each: part of the YAML schema, so in its layer; "
        "their executors run through the NodeContext they are handed",
    ),
    (2, ("fim.build",), "the immutable Snapshot, the per-file checks, builtin names"),
    (
        3,
        ("fim.run.services", "fim.run.budget"),
        "the run-time services and RunContext handed to every tool, hook and connector",
    ),
    (4, ("fim.llm", "fim.tools", "fim.store"), "model backends, builtin tools, persistence"),
    (
        5,
        ("fim.connectors", "fim.mcp", "fim.hooks"),
        "tools built from config (connectors, MCP) and hooks around tool calls",
    ),
    (
        6,
        (
            "fim.build.compile",
            "fim.build.vet",
            "fim.build.reload",
            "fim.build.gitops",
            "fim.build.git_fallback",
        ),
        "compile the whole project into a Snapshot (and reload it): the last checks build "
        "every hook once, so compiling sits above the hooks",
    ),
    (
        7,
        ("fim.engines",),
        "the loops (react, dag): they drive a model, tools and hooks they are handed, "
        "and know nothing of how a run is assembled",
    ),
    (
        8,
        ("fim.run",),
        "run-time assembly: pick the tools, guard the context, build the engine, delegate",
    ),
    (9, ("fim.workflows",), "workflows: graphs of agent runs and connector calls"),
    (
        10,
        (
            "fim.eval",
            "fim.server",
            "fim.commands",
            "fim.cli",
            "fim.__main__",
            "fim.scaffold",
            "fim.testing",
            "fim.capabilities",
        ),
        "surfaces (CLI, HTTP server, eval), the capability areas they hand every run, and "
        "the test doubles that drive them",
    ),
]

# Debt still to pay, one (importer, imported) edge per entry. The test fails when an entry
# is no longer needed, so these lists can only shrink. (The last debt, the capability areas
# named by the run layer, was paid by handing them in from the surfaces: fim.capabilities.)
KNOWN_BACK_EDGES: set[tuple[str, str]] = set()
KNOWN_CYCLES: list[set[str]] = []


def _modules() -> dict[str, tuple[Path, bool]]:
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, package)
    return found


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The fim module an imported dotted name lives in (``fim.a.b.Name`` -> ``fim.a.b``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: Path, package: bool) -> set[str]:
    """Every fim module ``module`` imports, at any depth, outside TYPE_CHECKING blocks."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if package else module.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            names = [f"{base}.{alias.name}" for alias in node.names]
        # "fim.pkg.module:attr" strings are imports in disguise (importlib at run time)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            target, colon, attr = node.value.partition(":")
            if colon and target.startswith("fim.") and attr.isidentifier():
                names = [target]
        for name in names:
            owner = _owner(name) if name.split(".")[0] == "fim" else None
            if owner and owner != module:
                found.add(owner)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(_parsed(path)[1])
    return found


@functools.cache
def _parsed(path: Path) -> tuple[str, ast.Module]:
    """A module's text and syntax tree, read once per process: the import graph and the
    check of function-level imports walk the same ~300 files (~0.6 s of CPU to parse)."""
    text = path.read_text(encoding="utf-8")
    return text, ast.parse(text, str(path))


@functools.cache
def graph() -> dict[str, set[str]]:
    """Every module's fim imports, parsed once per process and only by a process that runs
    a test of this file (at import time every xdist worker parsed all of fim to collect)."""
    return {name: _imports(name, path, package) for name, (path, package) in MODULES.items()}


def layer_of(module: str) -> int:
    best, layer = "", -1
    for number, prefixes, _why in LAYERS:
        for prefix in prefixes:
            hit = module == prefix or module.startswith(prefix + ".")
            if hit and len(prefix) > len(best):
                best, layer = prefix, number
    return layer


def _cycles() -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    counter = 0
    for start in graph():
        if start in index:
            continue
        work = [(start, iter(sorted(graph()[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph()[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_every_module_has_a_layer() -> None:
    assert [m for m in MODULES if layer_of(m) < 0] == []


def test_no_import_cycles() -> None:
    cycles = _cycles()
    new = [sorted(c) for c in cycles if c not in KNOWN_CYCLES]
    assert new == [], "import cycles (imports inside functions count too)"
    paid = [sorted(c) for c in KNOWN_CYCLES if c not in cycles]
    assert paid == [], "these cycles are gone: drop them from KNOWN_CYCLES"


def test_no_import_against_the_layers() -> None:
    back = {
        (importer, imported)
        for importer, imported_set in graph().items()
        for imported in imported_set
        if layer_of(imported) > layer_of(importer)
    }
    assert sorted(back - KNOWN_BACK_EDGES) == [], "imports from a lower layer into a higher one"
    assert sorted(KNOWN_BACK_EDGES - back) == [], "gone: drop them from KNOWN_BACK_EDGES"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_imports(module: str) -> None:
    importlib.import_module(module)


def _unexplained_function_imports(path: Path) -> list[str]:
    """Imports inside a function with no comment saying why: on the import's own line, or
    on the nearest line above its group of imports."""
    text, tree = _parsed(path)
    lines = text.split("\n")
    found: list[str] = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            own = "\n".join(lines[node.lineno - 1 : node.end_lineno])
            row = node.lineno - 2
            while row >= 0 and (
                not lines[row].strip()
                or lines[row].lstrip().startswith(("import ", "from ", ")"))
                or lines[row].startswith(" " * (node.col_offset + 4))  # a wrapped name list
            ):
                row -= 1
            above = lines[row] if row >= 0 else ""
            if "#" not in own and "#" not in above:
                found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    return found


def test_every_import_inside_a_function_says_why_it_is_deferred() -> None:
    """A function-level import is a choice (a heavy library loaded on first use, a module
    `fim --help` must not load): it carries a comment saying so, or it moves to the top."""
    unexplained = [
        where for path, _ in MODULES.values() for where in _unexplained_function_imports(path)
    ]
    assert unexplained == []
