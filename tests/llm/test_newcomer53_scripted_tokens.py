"""A scripted model's prompt tokens count the whole request, tool definitions included,
in the parts `fim show agent --prompt` and budgets count (newcomer-53 #14): a run of an
agent with tools reported `61+11 tokens` for two calls while the prompt view counted 64
tokens of tool definitions alone, so a budget tried offline was 4 to 5 times looser than
with a real model. Estimated at 4 characters a token, without loading a tokenizer (~0.2 s
of CPU that every scripted `fim run` and `fim eval` process would pay).
"""

from __future__ import annotations

import re
from pathlib import Path

from fim.build.compile import compile_project
from fim.events import LLMCall
from fim.llm.scripted import ScriptedModel, text, tool_call
from fim.run import tokens
from fim.run.prompt_report import prompt_report
from fim.run.tokens import count_messages
from fim.testing.runs import run_events, services_for
from fim.types import Message, ToolSpec, Usage

AGENT = """\
description: Answers about orders
model: scripted:clerk.script.yaml
instructions: You answer questions about orders.
tools: [calculator, web_fetch]
"""


def project(root: Path) -> Path:
    for name, body in {
        "fim.yaml": 'name: tok\nstate: "sqlite:///.fim/state.db"\n',
        "agents/clerk.yaml": AGENT,
        "clerk.script.yaml": "- text: hi\n",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(body)
    return root


async def test_each_calls_prompt_tokens_are_the_whole_requests_count(tmp_path: Path) -> None:
    snapshot = compile_project(project(tmp_path))
    view = await prompt_report(snapshot, "clerk", services_for(snapshot))
    (total,) = re.findall(r"total: (\d+) prompt tokens", view)
    model = ScriptedModel(
        [tool_call("calculator", {"expression": "6*7"}), text("42")],
        name="scripted:clerk.script.yaml",
    )
    events = await run_events(snapshot, "clerk", "what is 6*7?", model=model)
    calls = [e for e in events if isinstance(e, LLMCall)]
    assert len(calls) == len(model.requests) == 2
    for call, (messages, tools) in zip(calls, model.requests, strict=True):
        estimate = count_messages(messages, tools, model.name, exact=False)
        assert call.usage.prompt_tokens == estimate
        exact = count_messages(messages, tools, model.name)
        assert abs(estimate - exact) <= exact * 0.2, (estimate, exact)
        assert call.usage.prompt_tokens >= int(total)  # the prompt view: before any message


async def test_a_scripted_run_loads_no_tokenizer(tmp_path: Path) -> None:
    snapshot = compile_project(project(tmp_path))
    tokens._encoding.cache_clear()
    model = ScriptedModel([tool_call("calculator", {"expression": "6*7"}), text("42")])
    await run_events(snapshot, "clerk", "what is 6*7?", model=model)
    assert tokens._encoding.cache_info().misses == 0


async def test_usage_a_step_gives_is_kept(tmp_path: Path) -> None:
    snapshot = compile_project(project(tmp_path))
    given = text("hi").model_copy(update={"usage": Usage(prompt_tokens=5, completion_tokens=1)})
    model = ScriptedModel([given], name="scripted:clerk.script.yaml")
    (call,) = [
        e for e in await run_events(snapshot, "clerk", "hi", model=model) if isinstance(e, LLMCall)
    ]
    assert call.usage.prompt_tokens == 5


async def test_a_bare_scripted_model_counts_its_tools_too() -> None:
    model = ScriptedModel([text("ok")])
    messages = [Message(role="user", content="hi")]
    schema = {"type": "object", "properties": {"id": {"type": "integer"}}}
    tools = [ToolSpec(name="lookup", description="Look an order up.", parameters=schema)]
    answer = await model.complete(messages, tools)
    assert answer.usage.prompt_tokens == count_messages(messages, tools, model.name, exact=False)
    assert answer.usage.prompt_tokens > count_messages(messages, None, model.name, exact=False)
