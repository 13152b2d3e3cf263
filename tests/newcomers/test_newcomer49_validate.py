"""Newcomer 49's `fim validate`: each test is one finding of the review, stated as the
behaviour fixed, through the real CLI (a connector's empty `base_url` and fim's own hint
that made it, a misspelt model priced by the budget hint, a workflow eval case's inputs, a
node attribute typo, `tool_sequence` as a list, a script's connector action typo)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.inprocess_cli import run_fim


def fim(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_fim(*args, "--project", str(root), cwd=root, timeout=60)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("PETSTORE_URL", "OPENAI_API_BASE", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("ANTHROPIC_API_BASE", raising=False)
    root = tmp_path / "p"
    for folder in ("agents", "connectors", "workflows", "evals"):
        (root / folder).mkdir(parents=True)
    (root / "fim.yaml").write_text('name: p\nstate: "sqlite:///.fim/state.db"\n')
    (root / "s.yaml").write_text("- text: hi\n")
    (root / "agents" / "a.yaml").write_text("model: scripted:s.yaml\ntools: [calculator]\n")
    return root


def petstore(root: Path, base_url: str) -> None:
    (root / "connectors" / "petstore.yaml").write_text(
        "kind: http\n"
        "description: pets\n"
        f"base_url: {base_url}\n"
        "actions:\n"
        "  list_pets: {method: GET, path: /pets}\n"
    )


# --------------------------------------------- an empty or schemeless base_url (item 2)


def test_a_base_url_left_empty_by_its_variable_is_a_problem_offering_a_url(
    project: Path,
) -> None:
    petstore(project, "${PETSTORE_URL:-}")
    done = fim(project, "validate")
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == (
        "connectors/petstore.yaml:3:11: base_url '' is not an http(s) URL (it is empty): "
        "every call of this connector would fail before it is sent (PETSTORE_URL is empty "
        "here: export PETSTORE_URL=https://..., or give a default: "
        "${PETSTORE_URL:-http://127.0.0.1:8080})"
    )


def test_a_base_url_without_a_scheme_is_a_problem(project: Path) -> None:
    petstore(project, "petstore.example.com/v1")
    done = fim(project, "validate")
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == (
        "connectors/petstore.yaml:3:11: base_url 'petstore.example.com/v1' is not an http(s) "
        "URL (it does not start with http:// or https://): every call of this connector "
        "would fail before it is sent (write the API's address, starting with http:// or "
        "https://)"
    )


def test_a_base_url_from_the_environment_is_shown_masked(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PETSTORE_URL", "user:s3cret@petstore")
    petstore(project, "${PETSTORE_URL}")
    done = fim(project, "validate")
    assert done.returncode == 1
    assert "base_url '***' (the value of ${PETSTORE_URL}) is not" in done.stdout
    assert "s3cret" not in done.stdout


def test_the_suggested_default_url_validates(project: Path) -> None:
    petstore(project, "${PETSTORE_URL:-http://127.0.0.1:8080}/v1")
    done = fim(project, "validate")
    assert done.returncode == 0, done.stdout


def test_an_unset_base_url_variable_stays_a_warning_and_offers_a_url(project: Path) -> None:
    petstore(project, "${PETSTORE_URL}")
    (project / "agents" / "a.yaml").write_text("model: scripted:s.yaml\nconnectors: [petstore]\n")
    done = fim(project, "validate")
    assert done.returncode == 0
    assert "${PETSTORE_URL:-http://127.0.0.1:8080}" in done.stderr
    run = fim(project, "run", "a", "hi")
    assert run.returncode != 0
    assert run.stderr.strip().endswith(
        "(export PETSTORE_URL=... before starting fim, or write "
        "${PETSTORE_URL:-http://127.0.0.1:8080} while developing)"
    )


def test_an_unset_token_is_still_offered_an_empty_default(project: Path) -> None:
    (project / "connectors" / "crm.yaml").write_text(
        "kind: http\nbase_url: https://crm.example.com\n"
        "auth: {type: bearer, token: '${CRM_TOKEN_N49}'}\n"
        "actions:\n  get: {path: /}\n"
    )
    (project / "agents" / "a.yaml").write_text("model: scripted:s.yaml\nconnectors: [crm]\n")
    run = fim(project, "run", "a", "hi")
    assert run.stderr.strip().endswith("or write ${CRM_TOKEN_N49:-} while developing)")


def test_connector_import_offers_a_url_for_the_base_url_variable(
    project: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "openapi: 3.0.0\n"
        "info: {title: Pets, version: '1'}\n"
        "servers: [{url: /api/v3}]\n"
        "paths:\n"
        "  /pets:\n"
        "    get:\n"
        "      operationId: listPets\n"
        "      responses: {'200': {description: ok}}\n"
        "components:\n"
        "  securitySchemes:\n"
        "    key: {type: apiKey, in: header, name: X-Key}\n"
        "security: [{key: []}]\n"
    )
    done = fim(project, "connector", "import", str(spec), "--name", "petstore")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (
        "needs PETSTORE_URL (the API's address): export it, or write "
        "${PETSTORE_URL:-http://127.0.0.1:8080} while developing"
    ) in lines
    assert "needs PETSTORE_API_KEY: export it, or write ${PETSTORE_API_KEY:-} while developing" in (
        lines
    )


# ------------------------------------------------- a misspelt model name (item 4)


def test_a_budget_on_a_misspelt_model_offers_the_listed_name_before_a_price(
    project: Path,
) -> None:
    (project / "fim.yaml").write_text(
        'name: p\nstate: "sqlite:///.fim/state.db"\nbudget: {max_cost_usd: 0.5}\n'
    )
    (project / "agents" / "a.yaml").write_text("model: anthropic/claude-sonet-4-5\n")
    done = fim(project, "validate")
    assert done.returncode == 1
    (line,) = [line for line in done.stdout.splitlines() if "max_cost_usd" in line]
    assert line.endswith(
        "(did you mean 'anthropic/claude-sonnet-4-5'? litellm's table prices that; or add "
        "price: {input_per_mtok: ..., output_per_mtok: ...} to the model, declared as a "
        "role under models: in fim.yaml)"
    )


def test_a_misspelt_model_is_a_warning_with_the_listed_name(project: Path) -> None:
    (project / "agents" / "a.yaml").write_text("model: anthropic/claude-sonet-4-5\n")
    (project / "agents" / "b.yaml").write_text("model: openai/gpt-4o-mini\n")
    done = fim(project, "validate")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        "agents/a.yaml:1:8: warning: model 'anthropic/claude-sonet-4-5' is not in litellm's "
        "model table (did you mean 'anthropic/claude-sonnet-4-5'? a model newer than the "
        "table is fine as it is)"
    ]


# --------------------------------------------- a workflow eval case's inputs (item 5)

TIP = """\
inputs:
  bill: {type: number}
  people: {type: integer}
nodes:
  tip:
    type: tool
    tool: calculator
    args: {expression: "{{ inputs.bill }} * 0.15"}
outputs:
  tip: "{{ nodes.tip.output }}"
"""


def test_a_misspelt_workflow_case_input_is_a_problem_at_its_key(project: Path) -> None:
    (project / "workflows" / "tip.yaml").write_text(TIP)
    (project / "evals" / "tip.yaml").write_text(
        "workflow: tip\n"
        "cases:\n"
        "  - name: 80 for 3\n"
        "    input: {bill: 80, peple: 3}\n"
        "  - name: typed\n"
        "    input: {bill: eighty, people: 3}\n"
    )
    done = fim(project, "validate")
    assert done.returncode == 1
    hint = "(inputs of workflow 'tip': bill: number, people: integer)"
    assert done.stdout.splitlines()[:3] == [
        f"evals/tip.yaml:4:12: missing input 'people' (integer) {hint}",
        f"evals/tip.yaml:4:23: unknown input 'peple' (did you mean 'people'?) {hint}",
        f"evals/tip.yaml:6:19: input 'bill' = 'eighty': expected a number {hint}",
    ]


def test_a_workflow_case_input_its_vars_fill_in_is_checked_by_name_only(project: Path) -> None:
    (project / "workflows" / "tip.yaml").write_text(TIP)
    (project / "evals" / "tip.yaml").write_text(
        "workflow: tip\n"
        "cases:\n"
        "  - name: from vars\n"
        "    vars: {b: 80}\n"
        "    input: {bill: '{{ b }}', people: 3}\n"
    )
    assert fim(project, "validate").returncode == 0


def test_workflow_case_inputs_from_a_csv_are_checked_too(project: Path) -> None:
    (project / "workflows" / "tip.yaml").write_text(TIP)
    (project / "evals" / "tip.yaml").write_text("workflow: tip\ncases: tip.csv\n")
    (project / "evals" / "tip.csv").write_text("bill,peple\n80,3\n")
    done = fim(project, "validate")
    assert done.returncode == 1
    assert "unknown input 'peple' (did you mean 'people'?)" in done.stdout


# ------------------------------------------------- a node attribute typo (item 6)


def test_a_misspelt_node_attribute_is_a_problem_with_a_did_you_mean(project: Path) -> None:
    (project / "workflows" / "tip.yaml").write_text(
        TIP.replace('tip: "{{ nodes.tip.output }}"', 'tip: "{{ nodes.tip.outptu | float }}"')
    )
    done = fim(project, "validate")
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == (
        "workflows/tip.yaml:10:8: nodes.tip has no 'outptu' (did you mean 'output'? a node "
        "has output and status)"
    )


def test_node_attributes_and_mapping_methods_are_not_problems(project: Path) -> None:
    (project / "workflows" / "tip.yaml").write_text(
        TIP.replace(
            'tip: "{{ nodes.tip.output }}"',
            "tip: \"{{ nodes.tip.status }} {{ nodes['tip']['output'] }} "
            "{{ nodes.tip.get('output') }}\"",
        )
    )
    assert fim(project, "validate").returncode == 0


# -------------------------------------------------------- tool_sequence as a list (item 11)


def test_tool_sequence_takes_a_list_of_names(project: Path) -> None:
    (project / "s.yaml").write_text(
        "- tool_call: {name: calculator, arguments: {expression: '2*3'}}\n- text: '6'\n"
    )
    (project / "evals" / "a.yaml").write_text(
        "agent: a\n"
        "cases:\n"
        "  - name: seq\n"
        "    input: hi\n"
        "    expect:\n"
        "      - tool_sequence: [calculator]\n"
    )
    assert fim(project, "validate").returncode == 0
    done = fim(project, "eval")
    assert done.returncode == 0, done.stdout
    suite = project / "evals" / "a.yaml"
    suite.write_text(suite.read_text().replace("[calculator]", "[calculator, calculator]"))
    assert fim(project, "eval").returncode == 1  # one call, two expected: the list is the tools


def test_a_misspelt_tool_in_a_listed_sequence_is_located_at_the_name(project: Path) -> None:
    (project / "evals" / "a.yaml").write_text(
        "agent: a\n"
        "cases:\n"
        "  - name: seq\n"
        "    input: hi\n"
        "    expect:\n"
        "      - tool_sequence: [calculator, calculatr]\n"
    )
    done = fim(project, "validate")
    assert done.returncode == 1
    assert done.stdout.startswith("evals/a.yaml:6:37: agent 'a' has no tool 'calculatr'")


# --------------------------------------------- a script's meta-tool arguments (item 14)


def test_a_script_calling_a_missing_connector_action_is_warned_about(project: Path) -> None:
    petstore(project, "https://petstore.example.com")
    (project / "agents" / "a.yaml").write_text("model: scripted:s.yaml\nconnectors: [petstore]\n")
    (project / "s.yaml").write_text(
        "- tool_call:\n"
        "    name: connector\n"
        "    arguments: {subcommand: execute, connector: petstore, action: list_pet}\n"
        "- tool_call:\n"
        "    name: connector\n"
        "    arguments: {subcommand: discover, connector: petstor}\n"
        "- text: done\n"
    )
    done = fim(project, "validate")
    assert done.returncode == 0
    assert done.stderr.splitlines() == [
        "s.yaml:3:67: warning: connector 'petstore' has no action 'list_pet': its run "
        "answers this call with an error (fine if the script tests that on purpose) (did "
        "you mean 'list_pets'?)",
        "s.yaml:6:50: warning: agent 'a' has no HTTP connector 'petstor': its run answers "
        "this call with an error (fine if the script tests that on purpose) (did you mean "
        "'petstore'?)",
    ]


def test_a_script_naming_the_agents_connector_and_action_is_not_warned_about(
    project: Path,
) -> None:
    petstore(project, "https://petstore.example.com")
    (project / "agents" / "a.yaml").write_text("model: scripted:s.yaml\nconnectors: [petstore]\n")
    (project / "s.yaml").write_text(
        "- tool_call:\n"
        "    name: connector\n"
        "    arguments: {subcommand: discover, connector: petstore, action: list_pets}\n"
        "- text: done\n"
    )
    done = fim(project, "validate")
    assert (done.returncode, done.stderr) == (0, "")
