"""A stored agent run as an eval case (`fim runs save-case`, newcomer-53 #7).

What `adk web`'s "add session to eval set" does for a session, for one fim run: its input,
the tools it called (the expected trajectory: `tool_called` with the arguments of the
call's first success, the tool alone when every call of it failed) and the first line of
its answer (`contains`). The case is appended to the agent's suite, `evals/<agent>.yaml`,
with ruamel's round trip, so the suite's comments, order and quoting stay as written; a
suite that does not exist yet is created with `agent:` and the case.

The suite is the project's own file (attack-61 F3): a path, or a folder on the way to it,
that is a symbolic link, or that is not under the project's eval folder, is refused, and
the file is written whole to a temporary file beside it and moved over it, so a planted
link is never written through. What is written reads back as exactly the case (attack-61
F5): a text with a control or line-separator character is written double-quoted with
escapes, and a suite whose new case would not read back is not written at all.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from fim.errors import RunError
from fim.run_summary import first_line

_PLAIN = frozenset("\n\t ")
"""Characters a literal block or a plain scalar holds as they are; any other character
`str.isprintable` refuses (NUL, ESC, CR, U+0085, U+2028...) is written escaped."""

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


def checked_suite(path: Path, root: Path, folder: Path, shown: str) -> Path:
    """`path` (relative to the working directory) as a suite of the project at `root`, its
    eval folder `folder`: refused (a RunError naming it) when it is not under `folder`, or
    when it, or a folder between the project and it, is a symbolic link."""
    absolute = Path(os.path.abspath(path))
    base = Path(os.path.abspath(root))
    try:
        inside = absolute.relative_to(Path(os.path.abspath(folder)))
    except ValueError:
        inside = None
    if inside is None or not inside.parts:
        raise RunError(
            f"{shown}: not in the project's eval folder ({folder})",
            hint="an eval case is saved to a suite under the project's evals/ folder",
        )
    step = base
    for part in absolute.relative_to(base).parts:
        step = step / part
        if step.is_symlink():
            raise RunError(
                f"{shown}: {step} is a symbolic link; a case is never written through one",
                hint="replace the link with the suite file itself",
            )
    if not absolute.resolve().is_relative_to(Path(folder).resolve()):
        raise RunError(f"{shown}: resolves outside the project's eval folder ({folder})")
    return absolute


def _escaped(value: Any, every: bool = False) -> Any:
    """`value` with each string holding a character no plain or block scalar keeps as it
    is (every string when `every`) made double-quoted, where YAML escapes it; keys too."""
    # deferred: loading ruamel costs tens of ms
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    if isinstance(value, str):
        risky = every or any(not (c.isprintable() or c in _PLAIN) for c in value)
        return DoubleQuotedScalarString(value) if risky else value
    if isinstance(value, dict):
        out = CommentedMap((_escaped(k, every), _escaped(v, every)) for k, v in value.items())
        if isinstance(value, CommentedMap) and value.fa.flow_style():
            out.fa.set_flow_style()
        return out
    if isinstance(value, list):
        return CommentedSeq(_escaped(v, every) for v in value)
    return value


def _reads_back(text: str, case: dict[str, Any]) -> bool:
    """Whether the suite `text` parses (with fim's own YAML reader) and its last case is
    `case`, value for value."""
    # deferred: loading fim.config costs hundreds of ms
    from fim.config.yamlio import parse

    try:
        data = parse(text, "suite.yaml").data
        last = data["cases"][-1]
    except Exception:  # any reading error: it does not read back
        return False
    plain = {key: case[key] for key in ("name", "input", "expect")}
    return isinstance(last, dict) and last == plain


def _replace(suite: Path, text: str) -> None:
    """Write `text` to a new file beside `suite` and move it over `suite` (a link there is
    replaced, never followed), keeping an existing file's permissions."""
    suite.parent.mkdir(parents=True, exist_ok=True)
    temp = suite.parent / f".{suite.name}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(temp, flags, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        with contextlib.suppress(FileNotFoundError):  # a new suite keeps the umask's
            os.chmod(temp, stat.S_IMODE(os.lstat(suite).st_mode))
        os.replace(temp, suite)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


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
    entry = _escaped(entry)
    cases.append(entry)
    out = io.StringIO()
    yaml.dump(doc, out)
    if not _reads_back(out.getvalue(), case):  # e.g. a literal block's trailing spaces
        cases[-1] = entry = _escaped(entry, every=True)
        out = io.StringIO()
        yaml.dump(doc, out)
        if not _reads_back(out.getvalue(), case):
            raise RunError(
                f"{shown}: the case would not read back as the run's input and answer; "
                "nothing was written",
                hint="add the case by hand",
            )
    _replace(suite, out.getvalue())
    shown_case = io.StringIO()
    yaml.dump(CommentedSeq([entry]), shown_case)
    return shown_case.getvalue()


__all__ = ["ANSWER_CHARS", "append_case", "run_case"]
