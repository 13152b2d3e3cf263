"""What the deployment documents give operators to copy (docs/kubernetes.yaml,
docs/Dockerfile, `python -m fim`) takes the arguments fim takes and keeps the topology the
docs describe: a worker whose project came from elsewhere than the replicas' failed every
background run with "snapshot skew" (newcomer-7 #1)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import typer
import yaml

from fim.cli import build_app

ROOT = Path(__file__).resolve().parents[2]


def _manifests() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((ROOT / "docs" / "kubernetes.yaml").read_text())
    return {d["metadata"]["name"]: d for d in docs if d and d["kind"] == "Deployment"}


def _fim_args(deployment: dict[str, Any]) -> list[str]:
    (container,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "fim"
    ]
    return [str(a) for a in container["args"]]


def _parse(argv: list[str]) -> dict[str, Any]:
    """The options `fim ARGV` would run with, parsed by fim's own CLI (nothing runs)."""
    group: Any = typer.main.get_command(build_app())
    name, *rest = argv
    command = group.get_command(group.make_context("fim", [], resilient_parsing=True), name)
    assert command is not None, f"fim has no command {name!r}"
    return dict(command.make_context(name, rest).params)


def _source(params: dict[str, Any]) -> tuple[Any, ...]:
    return (params.get("git"), params.get("ref"), params.get("project"))


def test_workers_take_the_project_from_where_the_replicas_do() -> None:
    deployments = _manifests()
    serve = _parse(_fim_args(deployments["fim-serve"]))
    worker = _parse(_fim_args(deployments["fim-worker"]))
    assert serve["git"] and serve["ref"]
    assert _source(worker) == _source(serve)


def test_every_command_in_the_manifest_and_the_image_is_one_fim_takes() -> None:
    for deployment in _manifests().values():
        _parse(_fim_args(deployment))
    dockerfile = (ROOT / "docs" / "Dockerfile").read_text()
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.+)$", dockerfile, re.M)[1])  # type: ignore[index]
    command = json.loads(re.search(r"^CMD (.+)$", dockerfile, re.M)[1])  # type: ignore[index]
    assert entrypoint == ["fim"]
    assert _parse(command)["host"] == "0.0.0.0"


def test_the_image_copies_files_that_exist_and_installs_extras_fim_has() -> None:
    dockerfile = (ROOT / "docs" / "Dockerfile").read_text()
    for line in re.findall(r"^COPY (?!--from)(.+)$", dockerfile, re.M):
        *sources, _destination = line.split()
        for source in sources:
            assert (ROOT / source).exists(), source
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    (wanted,) = re.findall(r'\[([a-z,]+)\]"', dockerfile)
    assert set(wanted.split(",")) <= set(extras)


def test_python_dash_m_fim_is_the_fim_command() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "fim", "--version"], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("fim ")
