"""The run tree one request starts decides its conversation once, at its root (attack-59
F1): the root run's session, else the root run's id. Every run under it -- a delegate, a
workflow's agent node, an `llm` node's run, which has no `RunContext` -- carries the
root's, and the root knows each run of the tree by its id (a hook judging a call of one
finds that run's transcript)."""

from __future__ import annotations

from types import SimpleNamespace

from fim.run.tree import current_spend, spending, start_spend


def _agent(name: str) -> SimpleNamespace:
    return SimpleNamespace(name=name)


def _run(run_id: str, session: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(run_id=run_id, session=session)


def test_a_tree_without_a_session_is_the_root_runs_conversation() -> None:
    root_run, child_run = _run("root1"), _run("child1")
    root = start_spend(_agent("boss"), (), 10, root_run)
    assert current_spend.get() is None
    with spending(root):
        child = start_spend(_agent("helper"), (), 10, child_run)
        with spending(child):
            llm_node = start_spend(_agent("wf"), (), 10)  # an `llm` node's run
            assert llm_node.conversation == "root1"
            assert child.judged("child1") is child_run
            assert child.judged("a-workflow-run") is child_run  # the run whose work it is
        assert child.conversation == "root1"
    assert root.members == {"root1": root, "child1": child}
    assert root.judged("child1") is child_run


def test_a_tree_with_a_session_is_the_sessions_conversation() -> None:
    root = start_spend(_agent("boss"), (), 10, _run("root2", session="key:s1"))
    with spending(root):
        child = start_spend(_agent("helper"), (), 10, _run("child2"))
    assert (root.conversation, child.conversation) == ("key:s1", "key:s1")


def test_a_new_request_is_a_new_conversation() -> None:
    first = start_spend(_agent("boss"), (), 10, _run("r1"))
    with spending(first):
        pass
    with spending(first):  # a context the ended run leaked into starts a new tree
        again = start_spend(_agent("boss"), (), 10, _run("r2"))
    assert again.parent is None and again.conversation == "r2"
