"""docs/architecture.md's layer table names the modules added with the newcomer-54/55 and
attack-63/64/65 rounds, each in the row of its package with what it holds: a contributor
looking for where a thing lives finds it there, not only by grepping."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAP = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
ROWS = {line.split("|")[2].strip(): line for line in MAP.splitlines() if line.startswith("| ")}

ADDED = {
    "fim/server/a2a_progress.py": ("fim/server/", "`server/a2a_progress.py`"),
    "fim/server/session_repeat.py": ("fim/server/", "`server/session_repeat.py`"),
    "fim/server/mcp_ids.py": ("fim/server/", "`server/mcp_ids.py`"),
    "fim/mcp/call_stderr.py": ("fim/mcp/", "`call_stderr.py`"),
    "fim/run/remote_agents.py": ("fim/run/", "`remote_agents.py`"),
    "fim/run/remote_call.py": ("fim/run/", "`remote_call.py`"),
    "fim/build/schema_typos.py": ("fim/build/", "`schema_typos`"),
    "fim/build/case_var_checks.py": ("fim/build/", "`case_var_checks`"),
    "fim/build/eval_tool_args.py": ("fim/build/", "`eval_tool_args`"),
    "fim/build/remote_agent_checks.py": ("fim/build/", "`remote_agent_checks`"),
    "fim/eval/hooks_mode.py": ("fim/eval/", "`hooks_mode.py`"),
    "fim/eval/trajectory.py": ("fim/eval/", "`trajectory.py`"),
    "fim/eval/cassette_hooks.py": ("fim/eval/", "`cassette_hooks.py`"),
    "fim/eval/repeats.py": ("fim/eval/", "`repeats.py`"),
    "fim/eval/attempts.py": ("fim/eval/", "`attempts.py`"),
    "fim/eval/config_report.py": ("fim/eval/", "`config_report.py`"),
    "fim/eval/model_endpoints.py": ("fim/eval/", "`model_endpoints.py`"),
    "fim/commands/eval_gate.py": ("fim/commands/", "`commands/eval_gate.py`"),
    "fim/commands/worker_flags.py": ("fim/commands/", "`commands/worker_flags.py`"),
    "fim/connectors/http_arguments.py": ("fim/connectors/", "`http_arguments.py`"),
    "fim/llm/endpoint_secrets.py": ("fim/llm/", "`endpoint_secrets.py`"),
    "fim/config/case_rows.py": ("fim/config/", "`case_rows`"),
    "fim/testing/model_server_script.py": ("fim/testing/", "`testing/model_server_script.py`"),
    "fim/tools/sandbox/userns.py": ("fim/tools/", "`userns`"),
}


@pytest.mark.parametrize("module", list(ADDED))
def test_the_layer_table_names_the_module_in_its_packages_row(module: str) -> None:
    assert (REPO / module).is_file(), f"{module} moved: update the map and this list"
    package, named = ADDED[module]
    rows = [line for packages, line in ROWS.items() if f"`{package}" in packages]
    assert rows, f"no row of the layer table holds {package}"
    assert any(f"{named} " in row for row in rows), f"{module} is not in {package}'s row"
