"""An agent's `instructions` are a Jinja2 template that `fim validate` renders with the
context a run has (`project`, `agent`, `env`, `now`): an undefined name or attribute is a
problem at the instructions' line with a did-you-mean, never an empty string or a run-time
traceback. Prompts may live in files of the project (`{% include 'prompts/x.md' %}`,
`import`, `extends`); the loader never reads outside the project, a hidden file, the
agents' sandbox, anything but a small regular UTF-8 file."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.build.instructions import MAX_PROMPT_BYTES
from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.errors import ConfigError
from fim.run.assembly import assemble
from fim.run.services import RunContext, Services


def project(root: Path, instructions: str, **fim: Any) -> Path:
    """A project with one agent `a` whose instructions are `instructions`."""
    (root / "agents").mkdir(parents=True)
    (root / "prompts").mkdir()
    settings = {"name": "shop", "description": "A shop", "state": "sqlite:///.fim/state.db"}
    (root / "fim.yaml").write_text(json.dumps({**settings, **fim}))
    agent = {"description": "helps", "model": "openai/gpt-4o-mini", "instructions": instructions}
    (root / "agents" / "a.yaml").write_text(json.dumps(agent))
    return root


AT = "agents/a.yaml:1:73:"
"""Where the instructions' value starts in the agent file `project` writes."""


def problems(root: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        compile_project(root)
    return [str(p) for p in info.value.problems]


def prompt(snapshot: Snapshot) -> str:
    """The system prompt's instructions section of a run of agent `a`."""
    ctx = RunContext(
        snapshot=snapshot,
        agent=snapshot.agent("a"),
        services=Services(providers=CAPABILITIES, root=snapshot.root),
    )
    return asyncio.run(assemble(ctx)).sections[0][1]


@pytest.mark.parametrize(
    ("instructions", "expected"),
    [
        (
            "Hello {{ projct.name }}",
            "instructions: 'projct' is undefined (did you mean 'project'?)",
        ),
        (
            "Hello {{ project.nam }}",
            "instructions: 'project' has no attribute 'nam' (did you mean 'name'?)",
        ),
        (
            "{% if agent.descripton %}x{% endif %}",
            "instructions: 'agent' has no attribute 'descripton' (did you mean 'description'?)",
        ),
        (
            "Key: {{ env.SHOP_KEY }}",
            "instructions: 'env' has no variable 'SHOP_KEY' (add SHOP_KEY to env_allowlist in "
            "fim.yaml; instructions see only the variables listed there: REGION)",
        ),
        ("{{ 1 / 0 }}", "instructions: ZeroDivisionError: division by zero"),
    ],
)
def test_validate_renders_instructions_and_names_what_is_undefined(
    tmp_path: Path, instructions: str, expected: str
) -> None:
    root = project(tmp_path / "p", instructions, env_allowlist=["REGION"])
    assert problems(root) == [f"{AT} {expected}"]


def test_the_known_context_renders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REGION", "eu")
    text = "{{ agent.name }} of {{ project.name }} ({{ project.description }}) in {{ env.REGION }}"
    snapshot = compile_project(project(tmp_path / "p", text, env_allowlist=["REGION"]))
    assert prompt(snapshot) == "a of shop (A shop) in eu"


def test_prompts_live_in_files_with_include_import_and_extends(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        "{% extends 'prompts/base.md' %}{% block task %}Sell {{ project.name }}.{% endblock %}",
    )
    (root / "prompts" / "base.md").write_text(
        "{% import 'prompts/macros.md' as m %}{{ m.role(agent.name) }}\n"
        "{% block task %}{% endblock %}\n{% include 'prompts/rules.md' %}"
    )
    (root / "prompts" / "macros.md").write_text("{% macro role(n) %}You are {{ n }}.{% endmacro %}")
    (root / "prompts" / "rules.md").write_text("Be brief, {{ agent.description }}.")
    assert prompt(compile_project(root)) == "You are a.\nSell shop.\nBe brief, helps."


def test_a_mistake_inside_a_prompt_file_is_reported_there(tmp_path: Path) -> None:
    """At the mistake (an editor's marker, a GitHub annotation), naming what included it:
    it was reported at the agent's `instructions:` line."""
    root = project(tmp_path / "p", "{% include 'prompts/main.md' %}")
    (root / "prompts" / "main.md").write_text("You help.\nYou work for {{ projct.name }}.\n")
    assert problems(root) == [
        "prompts/main.md:2:17: instructions: 'projct' is undefined "
        "(did you mean 'project'?; included from agents/a.yaml:1)"
    ]


def test_a_snapshots_runs_keep_the_prompt_files_it_was_compiled_with(tmp_path: Path) -> None:
    """Prompt files are pinned in the snapshot like every other declaration: an edit made
    after the compile (broken, or the file deleted) never reaches the snapshot's runs; the
    next compile (a reload) checks it, and refuses it, or makes a new version with it."""
    root = project(tmp_path / "p", "{% include 'prompts/main.md' %}")
    (root / "prompts" / "main.md").write_text("You help {{ project.name }}.")
    snapshot = compile_project(root)
    assert dict(snapshot.prompt_files) == {"prompts/main.md": "You help {{ project.name }}."}
    assert prompt(snapshot) == "You help shop."

    (root / "prompts" / "main.md").write_text("You help {{ project.nme }}.\n")
    os.utime(root / "prompts" / "main.md", ns=(0, 1))  # another mtime: a reader would re-read
    assert prompt(snapshot) == "You help shop."
    assert problems(root) == [
        "prompts/main.md:1:21: instructions: 'project' has no attribute 'nme' "
        "(did you mean 'name'?; included from agents/a.yaml:1)"
    ]
    (root / "prompts" / "main.md").unlink()
    assert prompt(snapshot) == "You help shop."

    (root / "prompts" / "main.md").write_text("You sell for {{ project.name }}.")
    edited = compile_project(root)
    assert edited.version != snapshot.version
    assert prompt(edited) == "You sell for shop." and prompt(snapshot) == "You help shop."


SECRET = "sk-live-do-not-send"


@pytest.mark.parametrize(
    ("name", "refusal"),
    [
        ("../outside.md", "'..' may not lead out of the project"),
        ("prompts/out.md", "it is outside the project"),  # a symlink out
        (".env", "hidden files and folders (.env, .git, .fim) are never read"),
        ("prompts/env.md", "it links to a hidden file or folder"),  # a symlink to .env
        ("work/notes.md", "it is in a folder agents write"),
        ("work-keys/k1/notes.md", "it is in a folder agents write"),  # a key's runs write here
        ("prompts/fifo.md", "not a regular file"),
        ("prompts/big.md", f"larger than {MAX_PROMPT_BYTES // 1024} KiB"),
        ("prompts/latin1.md", "not UTF-8 text"),
        ("prompts", "it is a folder"),
    ],
)
def test_the_loader_reads_only_small_regular_files_of_the_project(
    tmp_path: Path, name: str, refusal: str
) -> None:
    root = project(tmp_path / "p", f"{{% include '{name}' %}}", sandbox="work")
    (tmp_path / "outside.md").write_text(SECRET)
    (root / ".env").write_text(SECRET)
    (root / "work").mkdir()
    (root / "work" / "notes.md").write_text(SECRET)
    (root / "work-keys" / "k1").mkdir(parents=True)
    (root / "work-keys" / "k1" / "notes.md").write_text(SECRET)
    (root / "prompts" / "out.md").symlink_to(tmp_path / "outside.md")
    (root / "prompts" / "env.md").symlink_to(root / ".env")
    os.mkfifo(root / "prompts" / "fifo.md")
    (root / "prompts" / "big.md").write_text("x" * (MAX_PROMPT_BYTES + 1))
    (root / "prompts" / "latin1.md").write_bytes("café".encode("latin-1"))
    [found] = problems(root)
    assert found.startswith(f"{AT} instructions: cannot include '{name}': ")
    assert refusal in found and SECRET not in found
