"""A stored agent run as an eval case (`fim runs save-case`, newcomer-53 #7).

What `adk web`'s "add session to eval set" does for a session, for one fim run: its input,
the tools it called (the expected trajectory: `tool_called` with the arguments of the
call's first success, the tool alone when every call of it failed) and the first line of
its answer (`contains`). The case is appended to the agent's suite, `evals/<agent>.yaml`,
with ruamel's round trip, so the suite's comments, order and quoting stay as written; a
suite that does not exist yet is created with `agent:` and the case.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from fim.errors import RunError
from fim.run_summary import first_line

ANSWER_CHARS = 80
"""The most characters of the answer's first line a saved `contains` asks for."""


def run_case(run_id: str, events: list[dict[str, Any]], output: str | None) -> dict[str, Any]:
    """The case of agent run `run_id`, from its events (as stored, masked) and its answer:
    `{name, input, expect}`, `expect` holding a `tool_called` per tool the run itself
    called (a delegated agent's calls are its own) and a `contains` of the answer's first
    line when it has one."""
    started = next((e for e in events if e.get("type") == "run_started"), None)
    if started is None:
        raise RunError(
            f"run {run_id} has no recorded input (it was refused before it started)",
            hint="only a run that started can be saved as an eval case",
        )
    text = str(started.get("input") or "")
    results = [e for e in events if e.get("type") == "tool_result"]
    failed = {e.get("call_id") for e in results if e.get("is_error")}
    tools: dict[str, dict[str, Any] | None] = {}
    for event in events:
        if event.get("type") != "tool_call" or event.get("run_id") not in (run_id, "", None):
            continue
        name = str(event.get("target") or event.get("name"))
        args = event.get("target_arguments") if event.get("target") else event.get("arguments")
        if tools.get(name) is None:  # the first call that succeeded gives the arguments
            tools[name] = dict(args or {}) if event.get("call_id") not in failed else None
    expect: list[dict[str, Any]] = []
    for name, args in tools.items():
        expect.append({"tool_called": {"name": name, **({"args": args} if args else {})}})
    answer = first_line(output or "", limit=10**6)[:ANSWER_CHARS].rstrip()
    if answer:
        expect.append({"contains": answer})
    return {"name": first_line(text, 60) or f"run {run_id}", "input": text, "expect": expect}


def append_case(suite: Path, agent: str, case: dict[str, Any], shown: str, run_id: str = "") -> str:
    """Append `case` to the suite file `suite` (`shown`: its path as the user reads it) of
    agent `agent`, its comments and layout kept; create the file when it does not exist.
    Returns the case as YAML, as it was written. A case name already in the suite gets
    the run's id after it."""
    # deferred: loading ruamel costs tens of ms
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.scalarstring import LiteralScalarString
    from ruamel.yaml.util import load_yaml_guess_indent

    yaml = YAML(typ="rt", pure=True)
    yaml.preserve_quotes = True
    yaml.width = 4096  # an existing long line is never folded
    if suite.exists():
        text = suite.read_text(encoding="utf-8")
        try:
            _, indent, offset = load_yaml_guess_indent(text)
            doc = yaml.load(text)  # its quotes kept (`preserve_quotes`)
        except Exception as exc:  # the user's file: its error said, never a traceback
            raise RunError(f"{shown}: not valid YAML ({str(exc).splitlines()[0]})") from None
        if doc is None:
            doc = CommentedMap()
        if not isinstance(doc, dict):
            raise RunError(f"{shown}: an eval suite is a mapping (agent:, cases:)")
        owner = doc.get("agent")
        if doc.get("workflow") is not None or (owner is not None and owner != agent):
            whose = f"agent '{owner}'" if owner is not None else f"workflow '{doc['workflow']}'"
            raise RunError(
                f"{shown} is the suite of {whose}, and the run is of agent '{agent}'",
                hint=f"leave out --suite to use evals/{agent}.yaml, or name a suite of {agent}",
            )
        yaml.indent(mapping=indent or 2, sequence=indent or 2, offset=offset or 0)
    else:
        doc = CommentedMap(agent=agent)
        yaml.indent(mapping=2, sequence=4, offset=2)
    cases = doc.get("cases")
    if cases is None:
        cases = doc["cases"] = CommentedSeq()
    if not isinstance(cases, list):
        raise RunError(
            f"{shown}: its cases: come from another file ({cases!r})",
            hint="add the case to that file, or name another suite with --suite",
        )
    names = {str(c.get("name")) for c in cases if isinstance(c, dict)}
    if case["name"] in names:
        case = {**case, "name": f"{case['name']} (run {run_id})"}
    entry = CommentedMap()
    entry["name"] = case["name"]
    entry["input"] = LiteralScalarString(case["input"]) if "\n" in case["input"] else case["input"]
    entry["expect"] = CommentedSeq()
    for item in case["expect"]:
        step = CommentedMap(item)
        if "tool_called" in step:
            called = CommentedMap(step["tool_called"])
            called.fa.set_flow_style()
            step["tool_called"] = called
        entry["expect"].append(step)
    cases.append(entry)
    out = io.StringIO()
    yaml.dump(doc, out)
    suite.parent.mkdir(parents=True, exist_ok=True)
    suite.write_text(out.getvalue(), encoding="utf-8")
    shown_case = io.StringIO()
    yaml.dump(CommentedSeq([entry]), shown_case)
    return shown_case.getvalue()


__all__ = ["ANSWER_CHARS", "append_case", "run_case"]
