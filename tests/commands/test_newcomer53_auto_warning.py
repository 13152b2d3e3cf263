"""`fim serve`'s start-up warning about missing keys tells the `auto` router apart from the
project's agents (newcomer-53 #16).

In a project whose agents all run on scripted or local models, `fim serve` said "agent auto
needs OPENAI_API_KEY (unset); their runs fail until it is set": an agent nobody declared,
read as a broken one. `auto` is the router fim serves over a project of more than one agent,
and it runs on `models.general`. Its line now says so, says whether the declared agents need
the key too, and how to point it at a model this machine has.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fim.build.compile import build_snapshot, load_project
from fim.commands.serve import keyless_agents

SCRIPTED = "model: scripted:s.yaml\n"
HOSTED = "model: openai/gpt-4o-mini\n"
ROUTER = (
    "warning: auto, the router fim serves over your agents (`model: auto` over HTTP, "
    "`fim run --auto`), runs on models.general (openai/gpt-4o-mini), which needs "
    "OPENAI_API_KEY (unset): its runs fail until it is set{alone} (set models.general in "
    "fim.yaml to a model you have, or FIM_MODEL=ollama/qwen2.5)"
)


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "FIM_MODEL", "FIM_FAST_MODEL"):
        monkeypatch.delenv(name, raising=False)


def warnings(root: Path, agents: dict[str, str], general: str = "openai/gpt-4o-mini") -> list[str]:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(
        f'name: p\nstate: "sqlite:///.fim/state.db"\nmodels: {{general: {general}}}\n'
    )
    (root / "s.yaml").write_text("- text: hi\n")
    for name, text in agents.items():
        (root / "agents" / f"{name}.yaml").write_text(text)
    return keyless_agents(build_snapshot(load_project(root)))


def test_scripted_agents_hear_only_that_the_router_needs_the_key(tmp_path: Path) -> None:
    assert warnings(tmp_path, {"helper": SCRIPTED, "stubby": SCRIPTED}) == [
        ROUTER.format(alone="; none of your agents needs it")
    ]


def test_agents_that_need_the_key_keep_their_line_and_the_router_has_its_own(
    tmp_path: Path,
) -> None:
    assert warnings(tmp_path, {"support": HOSTED, "helper": SCRIPTED}) == [
        "warning: agent support needs OPENAI_API_KEY (unset); their runs fail until it is set "
        "(or FIM_MODEL=ollama/qwen2.5 for a local model)",
        ROUTER.format(alone=""),
    ]


def test_a_declared_auto_is_an_agent_like_the_others(tmp_path: Path) -> None:
    found = warnings(tmp_path, {"auto": HOSTED, "helper": SCRIPTED})

    assert found == [
        "warning: agent auto needs OPENAI_API_KEY (unset); their runs fail until it is set "
        "(or FIM_MODEL=ollama/qwen2.5 for a local model)"
    ]


def test_no_router_line_without_a_router_or_when_its_model_needs_no_key(tmp_path: Path) -> None:
    assert warnings(tmp_path / "one", {"helper": SCRIPTED}) == []  # one agent: no router
    assert warnings(tmp_path / "local", {"a": SCRIPTED, "b": SCRIPTED}, "ollama/qwen2.5") == []
