"""The tree of runs one request starts: the first run, its delegates and theirs, the agent
and `llm` nodes of the workflows they run (an `llm` node is a run with no engine:
`fim.run.model_run`). Each run's place in it (`RunSpend`) is kept in
`current_spend` while it goes, like its owner (`fim.locks.current_owner`), so a run started
inside it -- in a tool call's task, a workflow node's -- finds the run it works for.

What the tree is for: a run's per-run budget counts what the runs under it spend
(`fim.run.spend.MeteredModel` checks every limit of the chain before each call), and the
tree is held to the project's `max_runs`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fim.errors import RunError
from fim.run.in_flight import Pool
from fim.types import Usage

if TYPE_CHECKING:
    from fim.config.schema.spend import Budget


def per_run(budgets: Sequence[tuple[str, Budget]]) -> tuple[tuple[str, Budget], ...]:
    """The (owner label, budget) pairs that limit one run (`max_tokens`, `max_cost_usd`)."""
    return tuple(
        (owner, b) for owner, b in budgets if b.max_tokens is not None or b.max_cost_usd is not None
    )


@dataclass(eq=False)
class RunSpend:
    """What one run and every run under it (its delegates, the agent and `llm` nodes of a
    workflow it started) spent so far, and its per-run limits.

    A delegate is its own run with its own budget, but it works for the run that started
    it: that run's `max_tokens` and `max_cost_usd` hold for what its delegates spend too,
    or a model told to fan out (32 calls a turn, each a delegate that fans out again)
    would multiply a per-run limit by the width of the tree. The root also counts the
    runs the tree started, held to the project's `max_runs`."""

    agent: str
    budgets: tuple[tuple[str, Budget], ...]
    """This run's own (owner label, budget) pairs with a per-run limit."""
    parent: RunSpend | None = None
    usage: Usage = field(default_factory=Usage)
    runs: int = 1
    """Runs started under the root so far, the root included (read on the root only)."""
    done: bool = False
    """The run ended: a context its `current_spend` leaked into (a stream closed from
    elsewhere) starts new trees, not runs under it."""
    pool: Pool = field(default_factory=Pool)
    """What the calls in flight under this run's per-run limits hold reserved (theirs and
    its delegates'): `fim.run.in_flight`."""
    unreported: Usage | None = None
    """What this run's own calls spent that no `llm_call` event reports: calls cut off
    before the provider's count came (the caller left, a cancel, a failed stream), at the
    most they may have cost, and the calls of its `fast` model (context summaries, tool
    selection, MCP sampling). The run's usage row counts them."""
    ends: list[Callable[[], None]] = field(default_factory=list)
    """Called once when the run ends, after its usage is written (`end`): the metered
    models settle their pools, MCP sampling calls still going for the run are cancelled."""
    rows: list[Callable[[str], None]] = field(default_factory=list)
    """Told about the run's usage row (`row`): "writing" when it begins to be written (a
    store read may find it while the pools still count its spend), then "written" or
    "refused" (the store did not take it: the spend stays counted in the pools)."""
    ledger: Any = None
    """The `fim.run.ledger.Ledger` writing this run's usage row (it binds itself when it
    sees the run's first event): a call that answers after the row is written gets a row
    of its own under the run's id (`Ledger.late`), so no budget misses it."""
    run: Any = None
    """This run's `fim.run.services.RunContext` (None for an `llm` node's run, which has
    no tools and no hooks)."""
    conversation: str = ""
    """The conversation every run of the tree belongs to, decided once at its root: the
    root run's session (its store key), else the root run's id. A delegate, a workflow an
    agent started, its nodes and their runs are that one conversation, as a Claude Code
    subagent's calls are its session's: this is the `session_id` command hooks get
    (`fim.hooks.transcript_file`). Each run took its own id before when the request had
    no session, and a guard keyed on `session_id` ("once per session") started counting
    again in every delegate and workflow node (attack-59 F1)."""
    members: dict[str, RunSpend] = field(default_factory=dict)
    """On the root: every run of the tree with a `run`, by its run id."""

    @property
    def over(self) -> bool:
        """The run ended, or its usage row is written: what it spends now is late."""
        return self.done or (self.ledger is not None and self.ledger.written)

    @property
    def root(self) -> RunSpend:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def ancestors(self) -> Iterator[RunSpend]:
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def judged(self, run_id: str) -> Any:
        """The `RunContext` of the run of this tree whose call a hook judges (`run_id`,
        the hook context's): that run when it is one of the tree's, else the run whose work
        goes on here (`current_spend`: a node of a workflow an agent started works for that
        agent), else None."""
        root = self.root
        found = root.members.get(run_id)
        if found is None:
            found = current_spend.get()
            if found is None or found.root is not root:
                return None
        return found.run

    def add(self, usage: Usage) -> None:
        """A model call of this run finished: it counts for this run and every run above."""
        node: RunSpend | None = self
        while node is not None:
            node.usage = node.usage + usage
            node = node.parent

    def row(self, state: str) -> None:
        """The run's usage row is "writing", "written" or "refused" (`rows`)."""
        for told in self.rows:
            told(state)

    def end(self) -> None:
        """The run ended and its usage row is written: what it counted in flight leaves
        the pools of the limits the store counts (`fim.run.spend.MeteredModel.settle`)."""
        self.done = True
        ends, self.ends = self.ends, []
        for settle in ends:
            settle()


current_spend: ContextVar[RunSpend | None] = ContextVar("fim_run_spend", default=None)
"""The run whose work is going on: a run started now (a delegate, a workflow's agent node)
is counted under it."""


def start_spend(
    agent: Any, budgets: Sequence[tuple[str, Budget]], max_runs: int, run: Any = None
) -> RunSpend:
    """The spend record of a run starting now, under the run going on (if any); refused
    when the tree already started `max_runs` runs. `run`: the run's `RunContext`, if it
    has one (its `run_id` and `session` decide the tree's `conversation` at the root)."""
    parent = current_spend.get()
    if parent is not None and parent.done:
        parent = None
    node = RunSpend(agent.name, per_run(budgets), parent, run=run)
    if parent is None:
        node.conversation = (run.session or run.run_id) if run is not None else ""
    else:
        node.conversation = parent.root.conversation
    if parent is not None:
        root = parent.root
        if root.runs >= max_runs:
            raise RunError(
                f"agent '{agent.name}' would be run number {root.runs + 1} started by one "
                f"request (the run of '{root.agent}'), above max_runs {max_runs}",
                hint="a model is fanning out delegations or workflows; raise max_runs in "
                "fim.yaml if this is intended",
            )
        root.runs += 1
    if run is not None:
        node.root.members[run.run_id] = node
    return node


@contextmanager
def spending(node: RunSpend) -> Iterator[None]:
    """`current_spend` set to `node` while its run goes (the runs it starts are under it)."""
    token = current_spend.set(node)
    try:
        yield
    finally:
        node.end()
        with suppress(ValueError):  # closed from another context
            current_spend.reset(token)
