"""One call of a remote A2A agent with the a2a-sdk client (the optional extra `fim[a2a]`):
imported by `fim.run.remote_agents` at the first call, never before."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
from a2a.client import A2AClientTimeoutError, ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import A2AError
from google.protobuf.json_format import ParseError

A2A_ERRORS: tuple[type[Exception], ...] = (A2AError, ParseError)
"""What a call raises for a remote agent's failure besides httpx's and ValueError."""

_ENDED = {
    pb.TaskState.TASK_STATE_INPUT_REQUIRED: "needs more input (input-required)",
    pb.TaskState.TASK_STATE_AUTH_REQUIRED: "needs authorization (auth-required)",
    pb.TaskState.TASK_STATE_FAILED: "failed",
    pb.TaskState.TASK_STATE_REJECTED: "rejected the task",
    pb.TaskState.TASK_STATE_CANCELED: "canceled the task",
}


@dataclass
class Answer:
    """What the remote agent answered: its text, or why it did not finish (`problem`)."""

    text: str
    context_id: str
    task_id: str = ""
    problem: str | None = None


def _text(parts: Any) -> str:
    return "\n".join(p.text for p in parts if p.text)


def answer_of(reply: pb.StreamResponse) -> Answer:
    """The answer in a blocking `SendMessage`'s reply: a Task or a Message."""
    if reply.HasField("message"):
        return Answer(_text(reply.message.parts), reply.message.context_id)
    task = reply.task
    said = _text(task.status.message.parts)
    text = "\n".join(t for a in task.artifacts if (t := _text(a.parts))) or said
    if not text:  # the agent's last message of the task's history
        agents = [m for m in task.history if m.role == pb.Role.ROLE_AGENT]
        text = _text(agents[-1].parts) if agents else ""
    state = task.status.state
    answer = Answer(text, task.context_id, task.id)
    if state in _ENDED:
        answer.problem = _ENDED[state] + (f": {said or text}" if said or text else "")
    elif state != pb.TaskState.TASK_STATE_COMPLETED:
        name = pb.TaskState.Name(state).removeprefix("TASK_STATE_").lower().replace("_", "-")
        answer.problem = f"did not finish (its task is {name})"
    elif not text:
        answer.problem = "finished with no text in its answer"
    return answer


async def exchange(
    http: httpx.AsyncClient, card: dict[str, Any], task: str, context_id: str, timeout: float
) -> Answer:
    """Send `task` in the remote conversation `context_id` and wait for the task's end, in
    at most `timeout` seconds (raises TimeoutError, httpx's errors, `A2A_ERRORS`)."""
    client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(
        parse_agent_card(card)
    )
    message = pb.Message(
        role=pb.Role.ROLE_USER,
        parts=[pb.Part(text=task)],
        message_id=uuid.uuid4().hex,
        context_id=context_id,
    )
    try:
        async with asyncio.timeout(timeout):
            replies = [r async for r in client.send_message(pb.SendMessageRequest(message=message))]
    except A2AError as exc:
        cause = exc.__cause__
        if isinstance(exc, A2AClientTimeoutError) or isinstance(cause, httpx.TimeoutException):
            raise TimeoutError from exc
        if isinstance(cause, httpx.HTTPStatusError):
            raise cause from None
        raise
    finally:
        await client.close()
    if not replies:
        return Answer("", context_id, problem="sent no reply")
    return answer_of(replies[-1])


__all__ = ["A2A_ERRORS", "Answer", "answer_of", "exchange"]
