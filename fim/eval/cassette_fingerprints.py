"""What a cassette keeps of each recorded model request besides its key, so a miss says
which request missed and what changed in it (newcomer51 #9: a rubric edit read "the
prompt, tools or instructions changed", and nothing in the file showed what had).

A fingerprint is who asked (`judge`, `agent:<name>`, `delegate:<name>`, `node:<id>`),
which iteration of its conversation it was, and short hashes of the request's system
prompt, tool schemas and other messages, each of the masked request as its key is: no
text of the request, nothing secret, and a reviewer of the cassette's diff sees which part
of which request a re-recording changed. A cassette recorded before fim stored them
misses as before, with the general words.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fim.eval.cassette_keys import NOW_MISS, reads_now
from fim.eval.judging import JUDGE_PROMPT
from fim.masking import Masker
from fim.observe.context import current_node
from fim.run.tree import current_spend
from fim.types import Message, ToolSpec

if TYPE_CHECKING:
    from fim.eval.cassettes import Cassette

_JUDGE_OPENING = JUDGE_PROMPT.split("\n", 1)[0]
PARTS = {"system": "system prompt", "tools": "tools", "messages": "messages"}
"""The hashed parts of a request, by the words a miss says them in."""


def caller() -> str:
    """Who is asking the model now, as stored: the workflow node, else a delegate (a run
    started under another) or the case's agent; `judge` is told by its prompt instead."""
    node = current_node.get()
    if node is not None:
        return f"node:{node}"
    spend = current_spend.get()
    if spend is None:
        return "agent"
    return f"{'delegate' if spend.parent is not None else 'agent'}:{spend.agent}"


def asker(messages: list[Message]) -> str:
    """Who sends `messages`: `judge` (told by its prompt), else `caller()`."""
    first = messages[0] if len(messages) == 1 else Message(role="system")
    judge = first.role == "user" and (first.content or "").startswith(_JUDGE_OPENING)
    return "judge" if judge else caller()


def _hash(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    text = re.sub(r'"(id|tool_call_id)": "[^"]*"', r'"\1": ""', text)  # as request_key
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def fingerprint(
    messages: list[Message], tools: list[ToolSpec] | None, masker: Masker
) -> dict[str, Any]:
    """The fingerprint of a request (hashes of its masked parts)."""
    dumped = [m.model_dump(exclude_none=True, exclude_defaults=True) for m in messages]
    dumped = masker.value(dumped)
    return {
        "by": masker.text(asker(messages)),
        "iteration": 1 + sum(m.role == "assistant" for m in messages),
        "system": _hash([m for m in dumped if m.get("role") == "system"]),
        "tools": _hash(masker.value([t.model_dump() for t in tools or []])),
        "messages": _hash([m for m in dumped if m.get("role") != "system"]),
    }


def who(by: str) -> str:
    """A stored `by` in words: `the judge`, `agent 'support'`, `node 'draft'`."""
    kind, _, name = by.partition(":")
    return "the judge" if kind == "judge" else f"{kind} '{name}'" if name else f"the {kind}"


def explain(
    now: Mapping[str, Any],
    recorded: list[Mapping[str, Any]],
    replayed: Mapping[str, set[str]],
) -> tuple[str, str] | None:
    """(what missed, hint) for the request fingerprinted `now`, given the fingerprints of
    the recorded exchanges and the keys replayed so far by each caller; None when the
    recording holds no fingerprints (recorded before fim stored them)."""
    if not recorded:
        return None
    asker = who(str(now["by"]))
    done = [
        f"{who(by)}: {len(keys)} call{'' if len(keys) == 1 else 's'}"
        for by, keys in sorted(replayed.items())
        if keys and by != now["by"]
    ]
    also = f"; replayed: {', '.join(done)}" if done else ""
    same = [f for f in recorded if f.get("by") == now["by"]]
    if not same:
        what = f"the request of {asker} (iteration {now['iteration']}) was not recorded{also}"
        return what, "no request of it is in the recording: re-record with `fim eval --record`"

    def changed(f: Mapping[str, Any]) -> list[str]:
        return [PARTS[p] for p in PARTS if f.get(p) != now.get(p)]

    closest = min(same, key=lambda f: (f.get("iteration") != now["iteration"], len(changed(f))))
    parts = changed(closest) or ["request"]
    what = (
        f"the request of {asker} (iteration {now['iteration']}) was not recorded: its "
        f"{' and '.join(parts)} changed since recording{also}"
    )
    if now["by"] == "judge":
        return (
            what,
            "a judge's rubric (or the answer it grades) changed: re-record with "
            "`fim eval --record`",
        )
    return what, "re-record with `fim eval --record`"


def miss_words(
    cassette: Cassette, model: str, messages: list[Message], tools: list[ToolSpec] | None
) -> tuple[str, str]:
    """(message, hint) of a recorded case's miss on this request. A model the recording
    never asked is said as such (newcomer6 #2: recorded under `FIM_MODEL=...`, replayed in CI
    without it, every case missed and the message blamed the prompt): the request key
    holds the model, so no prompt edit or re-run can make it hit. So is instructions'
    `now` replayed without a recorded one: the current time made another request. Else
    who asked and what changed (`explain`), or, with no fingerprints recorded, the
    general words."""
    name = cassette.masker.text(model)
    recorded = cassette.models()
    if recorded and name not in recorded:
        was = ", ".join(recorded)
        env = f"FIM_MODEL={recorded[0]}" if len(recorded) == 1 else "FIM_MODEL"
        return (
            f"cassette miss: {cassette.path.name} was recorded with {was}; this run uses {name}",
            f"the model changed since recording: set the same {env} (or --model) "
            "in CI, write the model into the agent or fim.yaml instead of an environment "
            "variable, or re-record with `fim eval --record`",
        )
    missed = f"cassette miss: {cassette.path.name} has no recorded reply for this request"
    if cassette.live_now is not None and reads_now(messages, cassette.live_now):
        return f"{missed}: {NOW_MISS[0]}", NOW_MISS[1]
    prints = [e["fingerprint"] for e in cassette.entries.values() if e.get("fingerprint")]
    said = explain(fingerprint(messages, tools, cassette.masker), prints, cassette.replayed)
    if said is not None:
        return f"cassette miss: {cassette.path.name}: {said[0]}", said[1]
    return missed, (
        "the prompt, tools or instructions changed since recording; "
        "re-record with `fim eval --record`"
    )
