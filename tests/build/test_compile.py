"""The compiler: cross-references between files, workflow graphs, templates, the Snapshot.

Every problem is pointed at the value at fault (`path:line:col`) with a did-you-mean where
one exists, and all problems of a project come back together in one ConfigError.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from fim.build.builtin_names import builtin_hook_names, builtin_tool_names
from fim.build.compile import compile_project, resolve_models
from fim.config.schema import ModelSettings
from fim.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).parents[1] / "fixtures" / "projects" / "minimal"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    shutil.copytree(FIXTURE, root)
    return root


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def problems(root: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        compile_project(root)
    return [str(p) for p in info.value.problems]


# --------------------------------------------------------------------------- snapshots


def test_repository_example_compiles() -> None:
    snapshot = compile_project(REPO)
    assert {"demo", "support", "triage", "analyst"} <= set(snapshot.agents)
    assert {"crm", "shop_db"} <= set(snapshot.connectors)
    assert len(snapshot.skills) >= 2 and "refund" in snapshot.workflows
    assert snapshot.evals and snapshot.hooks
    assert snapshot.connectors["shop_db"].kind == "database"


def test_snapshot_contents_sources_and_version(project: Path) -> None:
    snapshot = compile_project(project)
    assert snapshot.root == project.resolve()
    assert snapshot.models["fast"] == ModelSettings(model="openai/gpt-4o-mini", temperature=0)
    assert snapshot.source("agent", "helper").path == "agents/helper.yaml"
    assert snapshot.source("skill", "howto").path == "skills/howto/SKILL.md"
    assert len(snapshot.version) == 12 and snapshot.loaded_at > 0
    assert compile_project(project).version == snapshot.version
    write(
        project,
        "agents/helper.yaml",
        (project / "agents/helper.yaml").read_text() + "max_iterations: 7\n",
    )
    changed = compile_project(project)
    assert changed.version != snapshot.version
    assert changed.agents["helper"].max_iterations == 7


def test_snapshot_mappings_are_read_only(project: Path) -> None:
    snapshot = compile_project(project)
    with pytest.raises(TypeError):
        snapshot.agents["x"] = snapshot.agents["helper"]  # type: ignore[index]


def test_secrets_from_env_are_recorded(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("API_TOKEN", "tok-123456")
    snapshot = compile_project(project)
    assert "tok-123456" in snapshot.secrets
    assert snapshot.mask("Bearer tok-123456") == "Bearer ***"


def test_model_roles_resolve_aliases_and_blank_settings() -> None:
    models, origins = resolve_models(
        {
            "general": ModelSettings(model="openai/gpt-4o-mini", api_base="", api_key=""),
            "fast": "general",
            "local": "ollama/qwen2.5",
        }
    )
    assert models["general"].api_base is None and models["general"].api_key is None
    assert models["fast"] == models["general"]
    assert models["local"] == ModelSettings(model="ollama/qwen2.5")
    assert set(origins.values()) == {"fim.yaml"}


def test_fim_model_env_overrides_the_general_and_fast_roles() -> None:
    roles: dict[str, str | ModelSettings] = {
        "general": ModelSettings(
            model="openai/gpt-4o-mini", api_base="http://h/v1", temperature=0.2, max_tokens=99
        ),
        "fast": "general",
        "judge": "openai/gpt-4o",
    }
    models, origins = resolve_models(roles, {"FIM_MODEL": "ollama/qwen2.5"})
    # the endpoint belonged to the replaced model; sampling settings stay with the role
    assert models["general"] == ModelSettings(
        model="ollama/qwen2.5", temperature=0.2, max_tokens=99
    )
    assert models["fast"] == models["general"]
    assert origins["general"] == "FIM_MODEL (fim.yaml: openai/gpt-4o-mini)"
    assert origins["fast"] == origins["general"]  # an alias follows the override
    assert origins["judge"] == "fim.yaml"
    models, _ = resolve_models({"general": "openai/a", "fast": "openai/b"}, {"FIM_MODEL": "x/y"})
    assert models["fast"].model == "x/y"  # FIM_MODEL alone moves both roles
    models, origins = resolve_models(
        roles, {"FIM_MODEL": " ", "FIM_FAST_MODEL": "anthropic/claude-haiku-4-5"}
    )
    assert models["general"].model == "openai/gpt-4o-mini"  # blank means unset
    assert models["fast"] == ModelSettings(model="anthropic/claude-haiku-4-5")
    assert origins["fast"] == "FIM_FAST_MODEL (fim.yaml: general)"


def test_builtins_are_discovered_from_file_names() -> None:
    assert {"calculator", "web_fetch", "datetime"} <= builtin_tool_names()
    assert {"confirm", "truncate", "audit_log"} <= builtin_hook_names()
    assert not any(name.startswith("_") for name in builtin_tool_names())


# --------------------------------------------------------------------------- agents


def test_agent_references_are_checked_with_did_you_mean(project: Path) -> None:
    write(
        project,
        "agents/bad.yaml",
        """\
model: genral
tools: [calculater]
connectors: [apii]
mcp: [tim]
skills: [how-to]
workflows: [flw]
delegates: [helpr]
""",
    )
    assert problems(project) == [
        "agents/bad.yaml:1:8: unknown model role 'genral' (did you mean 'general'?)",
        "agents/bad.yaml:2:9: unknown builtin tool 'calculater' (did you mean 'calculator'?)",
        "agents/bad.yaml:3:14: unknown connector 'apii' (did you mean 'api'?)",
        "agents/bad.yaml:4:7: unknown MCP server 'tim' (did you mean 'time'?)",
        "agents/bad.yaml:5:10: unknown skill 'how-to' (did you mean 'howto'?)",
        "agents/bad.yaml:6:13: unknown workflow 'flw' (did you mean 'flow'?)",
        "agents/bad.yaml:7:13: unknown agent 'helpr' (did you mean 'helper'?)",
    ]


def test_model_strings_and_scripted_files(project: Path) -> None:
    write(project, "agents/a.yaml", "model: anthropic/claude-sonnet-4-5\n")
    write(project, "agents/b.yaml", "model: scripted:evals/missing.yaml\n")
    write(project, "agents/c.yaml", "model: {model: scripted:nope.yaml, temperature: 0}\n")
    assert problems(project) == [
        "agents/b.yaml:1:8: scripted model file 'evals/missing.yaml' not found "
        "(give a path relative to the project root)",
        "agents/c.yaml:1:16: scripted model file 'nope.yaml' not found "
        "(give a path relative to the project root)",
    ]


def test_agent_hooks_are_checked(project: Path) -> None:
    write(
        project,
        "agents/hooked.yaml",
        """\
hooks:
  - use: confrim
  - ref: audti
  - python: redact:RedactEmails
  - python: no_colon
  - command: ./hooks/missing.sh
  - event: PreToolUse
    command: echo ok
""",
    )
    assert problems(project) == [
        "agents/hooked.yaml:2:10: unknown builtin hook 'confrim' (did you mean 'confirm'?)",
        "agents/hooked.yaml:3:10: unknown hook ref 'audti' (did you mean 'audit'?)",
        "agents/hooked.yaml:4:13: python hook module 'hooks/redact.py' not found "
        "(no modules declared)",
        "agents/hooked.yaml:5:13: invalid python hook 'no_colon' "
        "(write module:Class, e.g. redact:RedactEmails)",
        "agents/hooked.yaml:6:5: a command hook needs 'event' "
        "(set event: PreToolUse, PostToolUse or SessionStart)",
        "agents/hooked.yaml:6:14: hook command './hooks/missing.sh' not found "
        "(paths are relative to the project root)",
    ]


def test_hook_ref_cycle(project: Path) -> None:
    write(project, "hooks/a.yaml", "ref: b\n")
    write(project, "hooks/b.yaml", "ref: a\n")
    assert problems(project) == [
        "hooks/a.yaml:1:6: hook ref cycle: a -> b -> a "
        "(a hook ref must end at a use/command/python hook)",
        "hooks/b.yaml:1:6: hook ref cycle: b -> a -> b "
        "(a hook ref must end at a use/command/python hook)",
    ]


def test_invalid_jinja_template(project: Path) -> None:
    write(project, "agents/tpl.yaml", 'instructions: "Hello {{ project.name }"\n')
    assert problems(project) == [
        "agents/tpl.yaml:1:15: invalid Jinja2 template: unexpected '}' "
        "(check {{ }} / {% %} pairs and filter names)"
    ]


def test_duplicate_names_point_at_both_files(project: Path) -> None:
    write(project, "agents/copy.yaml", "name: helper\ndescription: copy\n")
    assert problems(project) == [
        "agents/helper.yaml:1:1: duplicate agent name 'helper' "
        "(also declared at agents/copy.yaml:1:7; rename one)"
    ]


def test_a_broken_file_causes_no_unknown_reference_noise(project: Path) -> None:
    write(project, "connectors/api.yaml", "kind: http\nbase_url: [not, a, string]\n")
    found = problems(project)
    assert found == [
        "connectors/api.yaml:2:11: base_url: expected a string, got ['not', 'a', 'string']"
    ]


# --------------------------------------------------------------------------- workflows


def test_workflow_references(project: Path) -> None:
    write(
        project,
        "workflows/w.yaml",
        """\
inputs: {id: {type: string}}
nodes:
  a: {type: connector, connector: api, action: get_itme, args: {id: "{{ inputs.idd }}"}}
  b: {type: database, connector: api, sql: "select 1"}
  c: {type: connector, connector: db, action: x}
  d: {type: agent, agent: helpr, input: "{{ nodes.a.output }}", needs: [aa]}
  e: {type: condition, if: "{{ nodes.zz.ok }}", then: f, else: [a, g]}
  f: {type: mcp, server: tiem, tool: now}
  g: {type: tool, tool: calc, args: {}}
  h: {type: llm, prompt: "{{ nodes.h.output }}", model: fats}
outputs: {r: "{{ nodes.q.output }}"}
""",
    )
    assert problems(project) == [
        "workflows/w.yaml:3:48: connector 'api' has no action 'get_itme' "
        "(did you mean 'get_item'?)",
        "workflows/w.yaml:3:69: template refers to unknown input 'idd' (did you mean 'id'?)",
        "workflows/w.yaml:4:34: connector 'api' is kind: http, but a database node needs "
        "kind: database (use type: database for SQL, type: connector for HTTP actions)",
        "workflows/w.yaml:5:35: connector 'db' is kind: database, but a connector node needs "
        "kind: http (use type: database for SQL, type: connector for HTTP actions)",
        "workflows/w.yaml:6:27: unknown agent 'helpr' (did you mean 'helper'?)",
        "workflows/w.yaml:6:41: node 'd' uses nodes.a but does not wait for it "
        "(add 'a' to the needs of 'd')",
        "workflows/w.yaml:6:73: unknown node 'aa' in needs (did you mean 'a'?)",
        "workflows/w.yaml:7:28: template refers to unknown node 'zz' "
        "(valid nodes: a, b, c, d, e, f, g, h)",
        "workflows/w.yaml:8:26: unknown MCP server 'tiem' (did you mean 'time'?)",
        "workflows/w.yaml:9:25: unknown builtin tool 'calc' (did you mean 'calculator'?)",
        "workflows/w.yaml:10:26: node 'h' refers to its own output "
        "(a node can only use outputs of nodes it needs)",
        "workflows/w.yaml:10:57: unknown model role 'fats' (did you mean 'fast'?)",
        "workflows/w.yaml:11:14: template refers to unknown node 'q' "
        "(valid nodes: a, b, c, d, e, f, g, h)",
    ]


def test_a_node_may_only_read_nodes_it_waits_for(project: Path) -> None:
    write(
        project,
        "workflows/race.yaml",
        """\
nodes:
  fetch: {type: tool, tool: calculator, args: {expression: "1+1"}}
  check: {type: condition, needs: [fetch], if: "{{ nodes.fetch.output }}", then: use}
  use: {type: tool, tool: calculator, args: {expression: "{{ nodes.fetch.output }}"}}
  early: {type: tool, tool: calculator, args: {expression: "{{ nodes.use.output }}"}}
outputs: {r: "{{ nodes.early.output }}"}
""",
    )
    # `use` waits for `fetch` through the condition; `early` waits for nothing
    assert problems(project) == [
        "workflows/race.yaml:5:60: node 'early' uses nodes.use but does not wait for it "
        "(add 'use' to the needs of 'early')"
    ]


def test_condition_targets_must_exist(project: Path) -> None:
    write(
        project,
        "workflows/w.yaml",
        "nodes:\n  c: {type: condition, if: 'true', then: yes_node, else: [no_node]}\n",
    )
    assert problems(project) == [
        "workflows/w.yaml:2:42: unknown node 'yes_node' in then (valid nodes: c)",
        "workflows/w.yaml:2:59: unknown node 'no_node' in else (valid nodes: c)",
    ]


def test_needs_cycle_reports_the_path(project: Path) -> None:
    write(
        project,
        "workflows/loop.yaml",
        """\
nodes:
  start: {type: tool, tool: calculator, args: {expression: "1"}}
  a: {type: tool, tool: calculator, needs: [start, c]}
  b: {type: tool, tool: calculator, needs: [a]}
  c: {type: tool, tool: calculator, needs: [b]}
""",
    )
    assert problems(project) == [
        "workflows/loop.yaml:3:6: workflow cycle: a -> c -> b -> a "
        "(remove one of these needs/then/else edges)"
    ]


def test_condition_target_that_feeds_its_condition_is_a_cycle(project: Path) -> None:
    write(
        project,
        "workflows/w.yaml",
        """\
nodes:
  a: {type: tool, tool: calculator}
  check: {type: condition, needs: [a], if: "{{ nodes.a.output }}", then: a}
""",
    )
    assert problems(project) == [
        "workflows/w.yaml:2:6: workflow cycle: a -> check -> a "
        "(remove one of these needs/then/else edges)"
    ]


# --------------------------------------------------------------------------- evals


def test_eval_targets_are_checked(project: Path) -> None:
    write(project, "evals/a.yaml", "agent: helpr\ncases: [{name: x, input: hi}]\n")
    write(project, "evals/w.yaml", "workflow: flw\ncases: [{name: x, input: {item: a}}]\n")
    write(
        project,
        "evals/j.yaml",
        "agent: helper\ncases: [{name: x, input: hi, expect: "
        "[{judge: {rubric: ok, model: fst}}]}]\n",
    )
    assert problems(project) == [
        "evals/a.yaml:1:8: unknown agent 'helpr' (did you mean 'helper'?)",
        "evals/j.yaml:2:67: unknown model role 'fst' (did you mean 'fast'?)",
        "evals/w.yaml:1:11: unknown workflow 'flw' (did you mean 'flow'?)",
    ]


# --------------------------------------------------------------------------- all at once


def test_problems_across_files_come_back_together_sorted(project: Path) -> None:
    write(project, "agents/one.yaml", "tools: [nope]\n")
    write(project, "agents/two.yaml", "descripton: x\n")
    write(project, "evals/e.yaml", "agent: one\ncases: []\nthreshold: 2\n")
    found = problems(project)
    assert [line.split(":")[0] for line in found] == [
        "agents/one.yaml",
        "agents/two.yaml",
        "evals/e.yaml",
    ]
    assert found[2] == (
        "evals/e.yaml:3:12: threshold: Input should be less than or equal to 1 "
        "(a fraction: 1.0 is 100%)"
    )


def test_blank_api_base_from_an_unset_variable_means_unset(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCAL_BASE", raising=False)
    write(
        project,
        "agents/local.yaml",
        'model: {model: openai/gpt-4o-mini, api_base: "${LOCAL_BASE:-}"}\n',
    )
    snapshot = compile_project(project)
    assert snapshot.agents["local"].model.api_base is None


def test_secrets_are_masked_in_cross_reference_problems(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOKEN_IN_NAME", "hunter2-secret")
    write(project, "agents/leak.yaml", "connectors: ['${TOKEN_IN_NAME}']\n")
    assert problems(project) == [
        "agents/leak.yaml:1:14: unknown connector '***' (valid connectors: api, db)"
    ]


def test_unknown_role_without_close_match_lists_roles_and_litellm_strings(project: Path) -> None:
    write(project, "agents/m.yaml", "model: gpt4\n")
    assert problems(project) == [
        "agents/m.yaml:1:8: unknown model role 'gpt4' (valid model roles: fast, general; "
        "or use a litellm string such as openai/gpt-4o-mini)"
    ]


def test_a_provider_typo_is_a_problem_with_did_you_mean_and_litellm_is_not_imported(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fim.config.providers import litellm_providers, providers_in_source

    write(project, "agents/m.yaml", "model: olama/qwen2.5\n")
    write(project, "agents/n.yaml", "model: nscale/some-model\n")  # rare, but litellm's
    monkeypatch.setenv("FIM_MODEL", "antropic/claude-sonnet-4-5")
    found = problems(project)
    assert "agents/m.yaml:1:8: unknown model provider 'olama' in 'olama/qwen2.5' " in found[0]
    assert found[0].endswith("(did you mean 'ollama'?)") and len(found) == 2
    assert "FIM_MODEL: unknown model provider 'antropic'" in found[1]
    assert found[1].startswith("fim.yaml:") and "did you mean 'anthropic'?" in found[1]
    # the list is read from litellm's source, not from a 3 s import of litellm
    parsed = providers_in_source()
    assert {"ollama", "anthropic", "nscale", "bedrock"} <= parsed == litellm_providers()


def test_hook_scripts_that_are_missing_or_not_executable_are_problems(project: Path) -> None:
    write(project, "hooks/guard.sh", "#!/bin/sh\nexit 0\n")
    (project / "hooks" / "guard.sh").chmod(0o644)
    write(
        project,
        "agents/guarded.yaml",
        "hooks:\n"
        "  - {event: PreToolUse, command: ./hooks/guard.sh --strict}\n"
        "  - {event: PreToolUse, command: hooks/gone.sh}\n"
        "  - {event: PreToolUse, command: 'python3 -c \"print(1)\"'}\n",
    )
    assert problems(project) == [
        "agents/guarded.yaml:2:34: hook script './hooks/guard.sh' is not executable "
        "(chmod +x ./hooks/guard.sh; commit the mode with git update-index "
        "--chmod=+x ./hooks/guard.sh)",
        "agents/guarded.yaml:3:34: hook command 'hooks/gone.sh' not found "
        "(paths are relative to the project root)",
    ]
    (project / "hooks" / "guard.sh").chmod(0o755)
    write(project, "hooks/gone.sh", "#!/bin/sh\n")
    (project / "hooks" / "gone.sh").chmod(0o755)
    compile_project(project)


def test_a_snapshot_check_that_cannot_be_imported_fails_the_compile_not_skipped(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hook check imports fim.hooks.build when it runs; a broken install must surface.
    monkeypatch.setitem(sys.modules, "fim.hooks.build", None)
    with pytest.raises(ImportError, match=r"fim\.hooks\.build"):
        compile_project(project)
