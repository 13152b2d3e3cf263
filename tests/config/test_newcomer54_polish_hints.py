"""What people coming from docker-agent and Claude write for an agent's MCP servers gets
fim's way of saying it, not a dead end (newcomer-54 #13).

- docker-agent's `toolsets:` was "did you mean 'tools'?"; its `type: mcp` toolsets are
  fim's `mcp_servers:` in fim.yaml plus the agent's `mcp: [NAME]`, its builtin toolsets
  fim's `tools:`.
- A server pasted into an agent's `mcp:` list (`{command: python, args: [x.py]}`) was
  `mcp.0: expected a string, got {...}`, with no word of where servers are declared.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.errors import ConfigError

FIXTURE = Path(__file__).parents[1] / "fixtures" / "projects" / "minimal"
SERVERS = (
    "declare each server once in fim.yaml's `mcp_servers:` under a name (`inventory: "
    "{command: python, args: [inventory.py]}`, or `{url: ...}`: a Claude `mcpServers` "
    "entry as it is) and list the names in the agent: `mcp: [inventory]`"
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    shutil.copytree(FIXTURE, root)
    return root


def problem_of(project: Path, text: str) -> str:
    """The one problem an agent file of `text` (after its instructions) gets."""
    (project / "agents" / "ported.yaml").write_text(f"instructions: hi\n{text}")
    with pytest.raises(ConfigError) as caught:
        compile_project(project)
    found = [str(p) for p in caught.value.problems if p.path == "agents/ported.yaml"]
    assert len(found) == 1, found
    return found[0]


def test_docker_agents_toolsets_are_fims_mcp_servers_and_builtin_tools(project: Path) -> None:
    said = problem_of(
        project,
        "toolsets:\n  - type: mcp\n    command: python\n    args: [inventory.py]\n"
        "  - type: filesystem\n  - type: shell\n",
    )
    assert said == (
        "agents/ported.yaml:2:1: unknown key 'toolsets' (docker-agent's `type: mcp` toolsets "
        f"are fim's MCP servers: {SERVERS}; its builtin toolsets are fim's "
        "`tools: [file_ops, shell]`)"
    )
    assert "did you mean 'tools'" not in said


def test_toolsets_without_a_builtin_one_name_fims_tools_in_general(project: Path) -> None:
    said = problem_of(project, "toolsets:\n  - {type: mcp, ref: 'docker:duckduckgo'}\n")
    assert said.endswith("its builtin toolsets are fim's `tools:` (file_ops, shell, ...))")


def test_a_server_in_an_agents_mcp_list_says_where_servers_are_declared(project: Path) -> None:
    said = problem_of(project, "mcp:\n  - {command: python, args: [x.py]}\n")
    assert said == (
        "agents/ported.yaml:3:3: mcp: expected MCP server names (an agent's `mcp:` lists "
        f"servers by name: {SERVERS})"
    )


def test_server_names_in_the_mcp_list_are_still_checked_as_names(project: Path) -> None:
    said = problem_of(project, "mcp: [inventory]\n")
    assert said.startswith("agents/ported.yaml:2:7: unknown MCP server 'inventory'")
