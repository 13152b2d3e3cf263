"""`fim validate` over what an eval case names at run time: the tools of `tool_called`,
`tool_not_called` and `tool_sequence` must be tools its suite's agent (or workflow) can call.

A misspelt name is worse than a failing case: `tool_called: {name: calculater}` fails
only once a model has been paid for, and `tool_not_called: shel` passes for ever. The
suite's agent and workflow names are checked with the other references
(`fim.build.checks.Checker.check_eval`); this check needs the compiled project (the
tools a connector or a delegate brings), so it runs with the snapshot checks.

The names an agent can call are the hook view's (`fim.hooks.targets.hook_targets`, handed
in by `fim.build.compile`, which sits above the hooks): builtins, `<connector>__<action>`,
the meta-tools, its delegates' and workflows' tools; any name under an MCP server's
`<server>__` prefix counts, as its tools are known only once it runs. The tools a case
approves (`approvals: {approve: [save_note]}`) are checked the same way.

A case's `input` is a template over its `vars` (a CSV row's columns): `case_input_problems`
finds a name the input reads that no var defines (`{{ pcnt }}` after the column became
`pct`) with the compile-time parse of `fim.config.templates`, so `fim validate` reports it
at the input (for a CSV row, at its cell), and `fim eval` makes the same message the case's
ERROR instead of a traceback halfway through the run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from fim.build.eval_tool_args import tool_args_problems
from fim.build.snapshot import Locate, Snapshot
from fim.config.problems import suggest
from fim.config.schema import AgentDecl, Assertion, EvalCase, EvalSuite, WorkflowDecl
from fim.config.schema.evals import ApprovalAnswers
from fim.config.templates import PlainRefs, TemplateChecker, has_template
from fim.config.workflow_inputs import describe, input_problems
from fim.errors import Problem

TargetsOf = Callable[[Snapshot, AgentDecl], Any]
"""`fim.hooks.targets.hook_targets`: (names, servers, behind) of what an agent can call."""

Where = tuple[str | int, ...]


def _named_tools(suite: EvalSuite) -> Iterator[tuple[Where, str]]:
    """Every tool name the suite's assertions expect, with where it is written: a case's
    own assertions at the case, `default_expect`'s once, where the suite writes them (each
    case holds a copy of them after its own)."""
    for where, assertion in suite_assertions(suite):
        yield from _assertion_tools(where, assertion)
    for i, case in enumerate(suite.cases):
        if isinstance(case.approvals, ApprovalAnswers):
            for k, name in enumerate(case.approvals.approve):
                yield ("cases", i, "approvals", "approve", k), name


def suite_assertions(suite: EvalSuite) -> Iterator[tuple[Where, Assertion]]:
    """Every assertion of a suite with where it is written: a case's own at the case,
    `default_expect`'s once, where the suite writes them (each case holds a copy of them
    after its own, which would report one mistake once per case, at the wrong place)."""
    shared = len(suite.default_expect)
    for j, assertion in enumerate(suite.default_expect):
        yield ("default_expect", j), assertion
    for i, case in enumerate(suite.cases):
        own = case.expect[: len(case.expect) - shared] if shared else case.expect
        for j, assertion in enumerate(own):
            yield ("cases", i, "expect", j), assertion


def _assertion_tools(base: Where, assertion: Any) -> Iterator[tuple[Where, str]]:
    if assertion.tool_called is not None:
        yield (*base, "tool_called", "name"), assertion.tool_called.name
    if assertion.tool_not_called is not None:
        yield (*base, "tool_not_called"), assertion.tool_not_called
    if assertion.tool_blocked is not None:
        yield (*base, "tool_blocked"), assertion.tool_blocked
    sequence = assertion.tool_sequence
    if sequence is not None and sequence.tools is not None:
        for k, name in enumerate(sequence.tools):
            yield (*base, "tool_sequence", "tools", k), name
    for k, call in enumerate(sequence.calls or [] if sequence is not None else []):
        yield (*base, "tool_sequence", "calls", k, "name"), call.name


def _callable(
    snapshot: Snapshot, suite: EvalSuite, targets: TargetsOf
) -> tuple[set[str], list[str], str] | None:
    """(names, MCP servers, what calls them) for the suite's target; None when the target
    does not exist (reported as an unknown agent or workflow already)."""
    found: list[Any] = []
    names: set[str] = set()
    servers: list[str] = []
    if suite.agent is not None:
        agent = snapshot.agents.get(suite.agent)
        if agent is None:
            return None
        found.append(targets(snapshot, agent))
        what = f"agent '{agent.name}'"
    else:
        workflow = snapshot.workflows.get(suite.workflow or "")
        if workflow is None:
            return None
        what = f"workflow '{workflow.name}'"
        for node in workflow.nodes.values():
            uses = node.uses()
            names.update(uses.tools)
            names.update(f"{server}__{tool}" for server, tool in uses.mcp)
            found += [
                targets(snapshot, snapshot.agents[a]) for a in uses.agents if a in snapshot.agents
            ]
    for target in found:
        names.update(target.names)
        names.update(target.behind)  # the meta-tools (`connector`, `database`) by their name
        servers += target.servers
    return names, servers, what


def check_eval_tools(snapshot: Snapshot, locate: Locate, targets: TargetsOf) -> list[Problem]:
    """Every tool an eval assertion (or a case's `approvals`) names that its suite's
    target cannot call: the snapshot check of eval suites (`fim.build.compile` runs it;
    case inputs are checked with the declarations, `Checker.check_eval`)."""
    problems: list[Problem] = []
    for suite in snapshot.evals.values():
        expected = list(_named_tools(suite))
        if not expected:
            continue
        known = _callable(snapshot, suite, targets)
        if known is None:
            continue
        names, servers, what = known
        prefixes = tuple(f"{server}__" for server in servers)
        for where, name in expected:
            if name in names or (prefixes and name.startswith(prefixes)):
                continue
            hint = suggest(name, names | {f"{s}__*" for s in servers}, f"tools of {what}")
            src = locate("eval", suite.name, where)
            if where[-2:-1] == ("tools",) and src == locate("eval", suite.name, where[:-2]):
                # `tool_sequence: [a, b]` has no `tools:` key: the name is its list's item
                src = locate("eval", suite.name, (*where[:-2], where[-1]))
            message = f"{what} has no tool '{name}': this assertion could never be met"
            if where[-1] == "tool_not_called":
                message = f"{what} has no tool '{name}': this assertion could never fail"
            if "approvals" in where:
                message = f"{what} has no tool '{name}': no call to it will ask for approval"
            problems.append(Problem(src.path, src.line, src.column, message, hint))
        problems += tool_args_problems(snapshot, locate, suite, suite_assertions(suite))
    return problems


# ---------------------------------------------------------------------- case inputs

_TEMPLATES = TemplateChecker()
_BUILTIN_NAMES = frozenset(
    {"range", "dict", "lipsum", "cycler", "joiner", "namespace"}  # the environment's globals
    | {"true", "false", "none", "True", "False", "None"}  # constants (`PlainRefs` reads names)
)


def input_strings(value: Any, where: Where = ()) -> Iterator[tuple[Where, str]]:
    """Every string of an input (text, chat messages, workflow inputs), with its path:
    what the eval renders with the case's vars."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from input_strings(item, (*where, key))
    elif isinstance(value, list):
        for k, item in enumerate(value):
            yield from input_strings(item, (*where, k))


def _read_names(ast: Any, text: str) -> list[str]:
    """The top-level names a parsed template reads, in the order the text first uses them."""
    if isinstance(ast, PlainRefs):
        names = {name[0] for name in ast.names}
    else:  # memoised on the AST the parse cache shares: 10,000 CSV rows, one template
        found = ast.__dict__.get("_fim_read_names")
        if found is None:
            # deferred: only an input that is not plain `{{ a.b }}` needs Jinja's analysis
            from jinja2 import meta

            found = ast.__dict__["_fim_read_names"] = frozenset(meta.find_undeclared_variables(ast))
        names = set(found)
    return sorted(names - _BUILTIN_NAMES, key=lambda n: (text.find(n) % (len(text) + 1), n))


def vars_hint(case: EvalCase, name: str | None = None) -> str:
    """The hint of a case input's problem: a did-you-mean over its vars, and what they are."""
    listed = ", ".join(sorted(case.vars))
    close = suggest(name, case.vars) if name is not None else None
    if close is not None and close.startswith("did you mean"):
        return f"{close} the case's vars: {listed}"
    return f"the case's vars: {listed}"


def case_input_problems(case: EvalCase) -> list[tuple[Where, str, str]]:
    """(path under the case, message, hint) of each template in the case's input that
    cannot render with its vars: a syntax error, or a name no var defines. An input is
    rendered only when the case has vars (`fim.eval.execute`), so one without any is text
    as written (`{{ }}` and all) and has no problem."""
    if not case.vars:
        return []
    found: list[tuple[Where, str, str]] = []
    for where, text in input_strings(case.input, ("input",)):
        ast, error = _TEMPLATES.parse(text)
        if error is not None:
            found.append((where, f"input: {error}", "check {{ }} / {% %} pairs and filter names"))
            continue
        if ast is None:
            continue
        for name in _read_names(ast, text):
            if name not in case.vars:
                found.append((where, f"input: '{name}' is undefined", vars_hint(case, name)))
    return found


def workflow_case_problems(
    case: EvalCase, decl: WorkflowDecl | None
) -> list[tuple[Where, bool, str, str]]:
    """(path under the case, whether at its key, message, hint) of each input of a case of
    the workflow `decl` (None: not a workflow's suite, or an unknown workflow) that it
    could not start with: the check a run's start makes
    (`fim.config.workflow_inputs.input_problems`), an unknown name at its key, a wrong
    value at the value, a missing one at `input`. A value its vars fill in (`{{ bill }}`)
    is known only once rendered, so only its name is checked."""
    if decl is None:
        return []
    hint = f"inputs of workflow '{decl.name}': {describe(decl)}"
    given = case.input
    if not isinstance(given, dict):
        if case.vars and isinstance(given, str) and has_template(given):
            return []
        return [(("input",), False, "a workflow case's input is a mapping of its inputs", hint)]
    rendered = {k for k, v in given.items() if case.vars and isinstance(v, str) and has_template(v)}
    found: list[tuple[Where, bool, str, str]] = []
    for key, message in input_problems(decl, given)[1]:
        if key in rendered and key in decl.inputs:
            continue
        if key not in given:
            found.append((("input",), False, message, hint))
        else:
            found.append((("input", key), key not in decl.inputs, message, hint))
    return found
