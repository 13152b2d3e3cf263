"""One fim.yaml for a laptop, CI and production: models' secrets (newcomer-8 F).

A project names its model endpoint and key as variables that exist only where fim calls a
model:

    models: {general: {model: openai/gpt-4o-mini, api_base: "${LLM_BASE}", api_key: "${LLM_KEY}"}}

(an agent, a workflow's llm node and an eval judge may give their own `model:` settings).

- The commands that call models (`fim run`, `fim eval`, `fim workflow run|resume`,
  `fim serve`, `fim worker`, `fim mcp serve`, `fim show --prompt --request`) stop at each
  unset one with its `file:line:col` error, which names them.
- The others (`fim validate` and `--strict` in a pull request's job, `fim show`, `fim runs`)
  warn at each, located, and the setting is left out, as if unwritten.
- Whatever compiles the project outside the CLI (the server's reloads, the GitOps puller, a
  test) fails closed, and a model never receives a `${...}` or an empty key.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.config.schema import ModelSettings
from fim.config.serving import MODELS, command_needs, need_settings
from fim.errors import ConfigError
from fim.testing.model_server import OpenAIStubServer
from tests.inprocess_cli import run_fim

FIM_YAML = """\
name: shop
models:
  general: {model: openai/gpt-4o-mini, api_base: "${LLM_BASE}", api_key: "${LLM_KEY}"}
  fast: openai/gpt-4o-mini
"""
FILES = {
    "agents/helper.yaml": "description: answers\nmodel: general\ninstructions: Answer.\n",
    "agents/local.yaml": (
        "description: on its own endpoint\n"
        "model:\n"
        "  model: openai/qwen\n"
        '  api_base: "${LOCAL_BASE}"\n'
        "instructions: Answer.\n"
    ),
    "workflows/ask.yaml": (
        "nodes:\n"
        "  ask:\n"
        "    type: llm\n"
        "    prompt: hi\n"
        '    model: {model: openai/gpt-4o-mini, api_key: "${NODE_KEY}"}\n'
    ),
    "evals/helper.yaml": (
        "agent: helper\n"
        "cases:\n"
        "  - name: polite\n"
        "    input: hi\n"
        "    expect:\n"
        "      - judge: {rubric: polite, model: {model: openai/gpt-4o-mini, "
        'api_key: "${JUDGE_KEY}"}}\n'
    ),
}
UNSET = ("LLM_BASE", "LLM_KEY", "LOCAL_BASE", "NODE_KEY", "JUDGE_KEY")
COMMANDS = (
    "`fim run`, `eval`, `workflow run`, `workflow resume`, `serve`, `worker`, `mcp serve` "
    "and `runs rerun`"
)


def project(tmp_path: Path, fim_yaml: str = FIM_YAML, files: dict[str, str] = FILES) -> Path:
    root = tmp_path / "shop"
    root.mkdir()
    (root / "fim.yaml").write_text(fim_yaml)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def ci_env(**extra: str) -> dict[str, str]:
    """A pull request's job: the secrets are not there."""
    return {**{k: v for k, v in os.environ.items() if k not in UNSET}, **extra}


@contextmanager
def needing(groups: frozenset[str]) -> Iterator[None]:
    """Compile as a CLI command that needs only `groups` does."""
    was = need_settings(groups)
    try:
        yield
    finally:
        need_settings(was)


def warned(at: str, name: str, setting: str) -> str:
    return (
        f"{at}: warning: environment variable '{name}' is not set; only the commands that "
        f"call models read `{setting}` ({COMMANDS} refuse to start without it: export it "
        "where they run)"
    )


def error(at: str, name: str, setting: str) -> str:
    return (
        f"{at}: environment variable '{name}' is not set ({COMMANDS} call models with "
        f"`{setting}`: export the variable where they run)"
    )


def test_validate_and_strict_pass_with_a_located_warning_at_each_unset_model_setting(
    tmp_path: Path,
) -> None:
    root = project(tmp_path)
    for args in (("validate",), ("validate", "--strict")):
        done = run_fim(*args, "-p", str(root), env=ci_env())
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.startswith("ok: 2 agents, 1 workflow, 1 eval suite")
        assert [line for line in done.stderr.splitlines() if line] == [
            warned("fim.yaml:3:50", "LLM_BASE", "models.general"),
            warned("fim.yaml:3:74", "LLM_KEY", "models.general"),
            warned("agents/local.yaml:4:13", "LOCAL_BASE", "model"),
            warned("workflows/ask.yaml:5:49", "NODE_KEY", "nodes.ask.model"),
            warned("evals/helper.yaml:6:77", "JUDGE_KEY", "cases[0].expect[0].judge.model"),
        ]
    github = run_fim("validate", "--format", "github", "-p", str(root), env=ci_env())
    assert github.returncode == 0
    assert "::warning file=fim.yaml,line=3,col=50::environment variable 'LLM_BASE'" in (
        github.stderr
    )


def test_commands_that_read_no_model_warn_and_show_the_setting_left_out(tmp_path: Path) -> None:
    root = project(tmp_path)
    done = run_fim("show", "model", "general", "-p", str(root), env=ci_env())
    assert done.returncode == 0, done.stderr
    assert "model: openai/gpt-4o-mini" in done.stdout
    assert "api_base" not in done.stdout and "api_key" not in done.stdout
    assert warned("fim.yaml:3:50", "LLM_BASE", "models.general") in done.stderr.splitlines()
    listed = run_fim("runs", "list", "-p", str(root), env=ci_env())
    assert listed.returncode == 0, listed.stderr
    assert warned("fim.yaml:3:74", "LLM_KEY", "models.general") in listed.stderr.splitlines()


@pytest.mark.parametrize(
    "args",
    [
        ("run", "helper", "hi"),
        ("eval",),
        ("workflow", "run", "ask"),
        ("workflow", "resume", "r-1"),
        ("serve",),
        ("worker",),
        ("mcp", "serve"),
        ("show", "agent", "helper", "--prompt", "--request", "hi"),  # one fast-model call
    ],
)
def test_commands_that_call_models_stop_at_the_located_error(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    root = project(tmp_path)
    done = run_fim(*args, "-p", str(root), env=ci_env(), timeout=60)
    assert done.returncode == (2 if args[0] == "eval" else 1), done.stderr
    lines = done.stderr.splitlines()
    assert error("fim.yaml:3:50", "LLM_BASE", "models.general") in lines
    assert error("agents/local.yaml:4:13", "LOCAL_BASE", "model") in lines
    assert error("workflows/ask.yaml:5:49", "NODE_KEY", "nodes.ask.model") in lines
    assert "warning" not in done.stderr


def test_whatever_compiles_outside_the_cli_fails_closed(tmp_path: Path) -> None:
    """A reload inside `fim serve`, the GitOps puller and a worker process of `--workers N`
    compile without the CLI: none of them may call a model without its endpoint or key. A
    file a command that needs no model parsed before is parsed again (the loader's cache
    keeps the two apart)."""
    root = project(tmp_path)
    with pytest.MonkeyPatch.context() as env:
        for name in UNSET:
            env.delenv(name, raising=False)
        with needing(frozenset()):
            compile_project(root)
        with pytest.raises(ConfigError) as caught:
            compile_project(root)
    assert [str(p).split(" (")[0] for p in caught.value.problems] == [
        "agents/local.yaml:4:13: environment variable 'LOCAL_BASE' is not set",
        "evals/helper.yaml:6:77: environment variable 'JUDGE_KEY' is not set",
        "fim.yaml:3:50: environment variable 'LLM_BASE' is not set",
        "fim.yaml:3:74: environment variable 'LLM_KEY' is not set",
        "workflows/ask.yaml:5:49: environment variable 'NODE_KEY' is not set",
    ]


def test_a_snapshot_that_needs_no_model_holds_no_unset_value(tmp_path: Path) -> None:
    """Left out, never `""` or the `${...}` text: nothing a model could be sent."""
    root = project(tmp_path)
    with pytest.MonkeyPatch.context() as env:
        for name in UNSET:
            env.delenv(name, raising=False)
        with needing(frozenset()):
            snapshot = compile_project(root)
    judge = snapshot.evals["helper"].cases[0].expect[0].judge
    settings = [
        snapshot.models["general"],
        snapshot.agents["local"].model,
        snapshot.workflows["ask"].nodes["ask"].model,
        getattr(judge, "model", None),
    ]
    assert [(s.api_base, s.api_key) for s in settings if isinstance(s, ModelSettings)] == [
        (None, None)
    ] * 4


def test_a_model_receives_the_key_only_where_it_is_set(tmp_path: Path) -> None:
    with OpenAIStubServer(["4"]) as stub:
        fim_yaml = FIM_YAML.replace('"${LLM_BASE}"', stub.base_url)
        root = project(tmp_path, fim_yaml, {"agents/helper.yaml": FILES["agents/helper.yaml"]})
        refused = run_fim("run", "helper", "2+2?", "-p", str(root), env=ci_env())
        assert refused.returncode == 1
        column = fim_yaml.splitlines()[2].index('"${LLM_KEY}"') + 1
        assert error(f"fim.yaml:3:{column}", "LLM_KEY", "models.general") in refused.stderr
        assert stub.requests == []
        key = "sk-test-0123456789abcdefghij"
        done = run_fim("run", "helper", "2+2?", "-p", str(root), env=ci_env(LLM_KEY=key))
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "4"
        assert [r.headers.get("authorization") for r in stub.requests] == [f"Bearer {key}"]


def test_every_command_says_whether_it_calls_models() -> None:
    """A new command is placed consciously: these call no model (their project's model
    settings may be unset), every other one does."""
    from fim.cli import build_app  # deferred: builds every command module

    app = build_app()
    paths = [c.name or "" for c in app.registered_commands]
    for group in app.registered_groups:
        assert group.typer_instance is not None
        paths += [f"{group.name} {c.name}" for c in group.typer_instance.registered_commands]
    calling = {path for path in paths if MODELS in command_needs(path)}
    assert calling == {
        "run",
        "eval",
        "workflow run",
        "workflow resume",
        "serve",
        "worker",
        "mcp serve",
        "runs rerun",
    }
    assert set(paths) - calling == {
        *("init", "validate", "list", "show", "schema", "graph", "usage", "prune"),
        *("approvals list", "approvals approve", "approvals deny", "connector import"),
        *("mcp list", "mcp tools", "runs list", "runs show", "runs cancel", "runs save-case"),
        *("sessions list", "sessions show", "sessions forget", "store migrate"),
        *("workflow runs", "workflow show"),
    }


def test_the_model_string_itself_stays_required_everywhere(tmp_path: Path) -> None:
    """`fim validate` checks a model's provider, and its name is no secret: an unset
    `${VAR}` there fails every command, as before (`${VAR:-openai/gpt-4o-mini}` or
    `FIM_MODEL` vary it)."""
    root = project(tmp_path, FIM_YAML.replace("model: openai/gpt-4o-mini", 'model: "${LLM_MODEL}"'))
    done = run_fim("validate", "--strict", "-p", str(root), env=ci_env())
    assert done.returncode == 1
    assert done.stdout.startswith(
        "fim.yaml:3:20: environment variable 'LLM_MODEL' is not set (export LLM_MODEL=... "
        "or give a default: ${LLM_MODEL:-value})\n"
    )


async def test_a_model_built_where_models_are_not_read_refuses_to_be_called(
    tmp_path: Path,
) -> None:
    """Such a snapshot left a model's settings out (its `api_base` is the provider's
    default now): `show --prompt` may build its model to show it, but a reply would go to
    the provider's public endpoint with the key in the environment, so it fails closed."""
    from fim.errors import RunError
    from fim.llm import make_model
    from fim.types import Message

    root = project(tmp_path)
    with pytest.MonkeyPatch.context() as env:
        for name in UNSET:
            env.delenv(name, raising=False)
        with needing(frozenset()):
            snapshot = compile_project(root)
            model = make_model(snapshot.models["general"], root)
            assert model.name
            with pytest.raises(RunError, match="may not call a model"):
                await model.complete([Message(role="user", content="hi")])
            with pytest.raises(RunError, match="may not call a model"):
                model.stream([Message(role="user", content="hi")])
