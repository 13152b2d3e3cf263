"""What a remote A2A agent's reply means to `call_agent` (`fim.run.remote_call.answer_of`):
a completed task's answer is its artifacts' text, else its status message, else its last
agent message; a task that stops to ask for input or authorization, fails or is rejected is
a problem the tool error names, with what the remote said; a plain message is an answer."""

from __future__ import annotations

import pytest

pytest.importorskip("a2a", reason="a2a-sdk is not installed (pip install 'fim[a2a]')")

from a2a.types import a2a_pb2 as pb

from fim.run.remote_agents import card_url
from fim.run.remote_call import answer_of

S = pb.TaskState


def task(state: int, said: str = "", artifacts: tuple[str, ...] = ()) -> pb.StreamResponse:
    status = pb.TaskStatus(state=state)
    if said:
        status.message.CopyFrom(pb.Message(role=pb.Role.ROLE_AGENT, parts=[pb.Part(text=said)]))
    found = pb.Task(id="t-1", context_id="c-1", status=status)
    for i, text in enumerate(artifacts):
        found.artifacts.append(pb.Artifact(artifact_id=f"a{i}", parts=[pb.Part(text=text)]))
    return pb.StreamResponse(task=found)


def test_a_completed_task_answers_with_its_artifacts_else_its_status_message():
    done = answer_of(task(S.TASK_STATE_COMPLETED, "working on it", ("Placed.", "Ref 7.")))
    assert (done.text, done.problem, done.context_id, done.task_id) == (
        "Placed.\nRef 7.",
        None,
        "c-1",
        "t-1",
    )
    assert answer_of(task(S.TASK_STATE_COMPLETED, "Placed.")).text == "Placed."
    history = task(S.TASK_STATE_COMPLETED)
    history.task.history.append(pb.Message(role=pb.Role.ROLE_AGENT, parts=[pb.Part(text="Hi")]))
    assert answer_of(history).text == "Hi"
    empty = answer_of(task(S.TASK_STATE_COMPLETED))
    assert empty.problem == "finished with no text in its answer"


@pytest.mark.parametrize(
    ("state", "problem"),
    [
        (S.TASK_STATE_INPUT_REQUIRED, "needs more input (input-required): Which warehouse?"),
        (S.TASK_STATE_AUTH_REQUIRED, "needs authorization (auth-required): Which warehouse?"),
        (S.TASK_STATE_FAILED, "failed: Which warehouse?"),
        (S.TASK_STATE_REJECTED, "rejected the task: Which warehouse?"),
    ],
)
def test_a_task_that_stops_short_is_a_problem_with_what_the_remote_said(state: int, problem: str):
    assert answer_of(task(state, "Which warehouse?")).problem == problem


def test_a_task_still_working_and_a_plain_message_reply():
    assert answer_of(task(S.TASK_STATE_WORKING)).problem == "did not finish (its task is working)"
    message = pb.Message(role=pb.Role.ROLE_AGENT, context_id="c-9", parts=[pb.Part(text="Hi")])
    reply = answer_of(pb.StreamResponse(message=message))
    assert (reply.text, reply.context_id, reply.problem) == ("Hi", "c-9", None)


def test_the_card_is_read_at_the_endpoint_or_at_the_card_url_given():
    assert card_url("https://x.example/a2a/") == "https://x.example/a2a/.well-known/agent-card.json"
    given = "https://x.example/.well-known/agent-card.json"
    assert card_url(given) == given
