"""Google ADK's eval files in `evals/`: fim does not read them, and says so.

`adk eval` reads `*.evalset.json` (eval sets), `*.test.json` (test files) and
`test_config.json` (criteria). Left in `evals/` by a team coming from ADK, `fim validate`
said nothing and `fim eval evals/x.evalset.json` said only "unknown eval suite"
(newcomer51 #10): each is now a warning (`fim validate`) or an error's reason (`fim eval
PATH`) that names fim's words for it.
"""

from __future__ import annotations

from pathlib import Path

from fim.errors import Problem

CASES = (
    "ADK eval set: fim does not read it; write an evals/<suite>.yaml whose cases are its eval_cases"
)
CASE_HINT = (
    "each eval_case is a case: {name: <eval_id>, input: <user_content text>, expect: "
    "[tool_sequence: {tools: [<tool_uses names>], mode: exact}, judge: <rubric>]}; "
    "`tool_uses: []` is `tool_sequence: {tools: [], mode: exact}`"
)
CRITERIA = "ADK eval criteria: fim does not read test_config.json"
CRITERIA_HINT = (
    "tool_trajectory_avg_score is a case's `tool_sequence: {tools: [...], mode: exact}`, "
    "rubrics and final_response_match_v2 are `judge:`, a suite's pass rate is its "
    "`threshold:`; response_match_score (ROUGE) has no counterpart"
)


def adk_kind(name: str) -> str | None:
    """`evalset` or `criteria` for a file name ADK's `adk eval` reads, else None."""
    if name.endswith((".evalset.json", ".test.json")):
        return "evalset"
    return "criteria" if name == "test_config.json" else None


def adk_eval_files(root: Path) -> list[Problem]:
    """A warning at each ADK eval file under `evals/` (`.cassettes/` left out)."""
    folder = root / "evals"
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.rglob("*.json")):
        kind = adk_kind(path.name)
        if kind is None or ".cassettes" in path.relative_to(folder).parts:
            continue
        where = path.relative_to(root).as_posix()
        message, hint = (CASES, CASE_HINT) if kind == "evalset" else (CRITERIA, CRITERIA_HINT)
        found.append(Problem(where, 1, 1, message, hint))
    return found


def not_a_suite(written: str) -> str | None:
    """Why `fim eval PATH` does not run a `.json` file: ADK's, or no suite format."""
    if not written.endswith(".json"):
        return None
    kind = adk_kind(Path(written).name)
    if kind == "evalset":
        return f"{written}: {CASES} ({CASE_HINT})"
    if kind == "criteria":
        return f"{written}: {CRITERIA} ({CRITERIA_HINT})"
    return (
        f"{written}: not an eval suite: a suite is evals/<name>.yaml (its cases may be in a "
        "CSV or JSONL file it names: `cases: cases.jsonl`); a JSON report is read by fim "
        "eval merge, --baseline or --rerun-failed"
    )
