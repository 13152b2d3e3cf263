"""`fim init` sets the editor up: fim's JSON Schemas in `.fim/schema/` (git-ignored: they
follow the installed fim, not the project) and VS Code's `yaml.schemas` pointing the
project's YAML files at them. The user's own `.vscode/settings.json` is never clobbered."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import jsonschema
import yaml
from typer.testing import CliRunner

from fim.cli import app

runner = CliRunner()


def init(target: Path) -> str:
    result = runner.invoke(app, ["init", str(target)])
    assert result.exit_code == 0, result.output
    return result.stdout


def schemas_of(target: Path) -> dict[str, list[str]]:
    settings = json.loads((target / ".vscode" / "settings.json").read_text())
    mapping: dict[str, list[str]] = settings["yaml.schemas"]
    return mapping


def test_init_writes_the_schemas_and_maps_them_to_the_projects_yaml(tmp_path: Path) -> None:
    target = tmp_path / "p"
    out = init(target)
    assert "editor: 6 JSON Schemas in .fim/schema/" in out and "wrote .vscode/settings.json" in out
    assert out.endswith("next: cd " + str(target) + " && fim validate && fim list\n")
    mapping = schemas_of(target)
    assert mapping[".fim/schema/agent.schema.json"] == ["agents/*.yaml", "agents/*.yml"]
    for schema in mapping:  # every path the setting names exists, relative to the project
        assert (target / schema).is_file()
    assert (target / ".gitignore").read_text() == ".fim/\n"  # generated: not committed


def test_every_starter_file_is_valid_against_the_schema_its_glob_gives_it(tmp_path: Path) -> None:
    """A newcomer's first look in the editor shows no false error: each YAML file of the
    starter validates against the schema the setting attaches (scripted replies excluded)."""
    target = tmp_path / "p"
    init(target)
    mapping = schemas_of(target)
    checked = []
    for path in sorted(target.rglob("*.y*ml")):
        rel = path.relative_to(target).as_posix()
        if rel.startswith(".fim/"):
            continue
        globs = [(s, g) for s, gs in mapping.items() for g in gs]
        excluded = any(g.startswith("!") and fnmatch.fnmatch(rel, g[1:]) for _, g in globs)
        matched = [s for s, g in globs if not g.startswith("!") and fnmatch.fnmatch(rel, g)]
        if excluded or not matched:
            continue
        schema = json.loads((target / matched[0]).read_text())
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
        checked.append(rel)
    assert "agents/assistant.yaml" in checked and "evals/assistant.yaml" in checked
    assert "evals/assistant.script.yaml" not in checked and "fim.yaml" in checked


def test_an_existing_json_settings_file_gets_the_key_merged_in(tmp_path: Path) -> None:
    target = tmp_path / "p"
    (target / ".vscode").mkdir(parents=True)
    mine = {"editor.tabSize": 2, "yaml.schemas": {".fim/schema/agent.schema.json": ["x.yaml"]}}
    (target / ".vscode" / "settings.json").write_text(json.dumps(mine))
    out = init(target)
    assert "added fim's schemas to yaml.schemas in .vscode/settings.json" in out
    settings = json.loads((target / ".vscode" / "settings.json").read_text())
    assert settings["editor.tabSize"] == 2
    assert settings["yaml.schemas"][".fim/schema/agent.schema.json"] == ["x.yaml"]  # theirs
    assert settings["yaml.schemas"][".fim/schema/eval.schema.json"][0] == "evals/*.yaml"


def test_a_settings_file_that_is_not_plain_json_is_left_and_the_setting_printed(
    tmp_path: Path,
) -> None:
    target = tmp_path / "p"
    (target / ".vscode").mkdir(parents=True)
    jsonc = '{\n  // my settings\n  "editor.tabSize": 2,\n}\n'
    (target / ".vscode" / "settings.json").write_text(jsonc)
    out = init(target)
    assert (target / ".vscode" / "settings.json").read_text() == jsonc
    assert ".vscode/settings.json is not plain JSON; left as it is" in out
    printed = out.split("for VS Code, add to .vscode/settings.json:\n", 1)[1]
    setting = json.loads(printed[: printed.index("\nnext:")])
    assert ".fim/schema/project.schema.json" in setting["yaml.schemas"]


def test_validate_in_a_fresh_clone_says_how_to_write_the_editors_schemas(tmp_path: Path) -> None:
    """`.vscode/settings.json` is committed, `.fim/` is not: in a clone every YAML file
    showed "Unable to load schema" and nothing said why. A note (not a warning: `--strict`
    in CI passes), until the schemas are written."""
    import shutil

    from typer.testing import CliRunner

    from fim.cli import app

    made = tmp_path / "made"
    assert CliRunner().invoke(app, ["init", str(made)]).exit_code == 0
    shutil.rmtree(made / ".fim")  # what a clone has
    result = CliRunner().invoke(app, ["validate", "--strict", "--project", str(made)])
    assert result.exit_code == 0, result.output
    assert "`fim schema --write .fim/schema` writes it" in result.stderr
    assert (
        CliRunner().invoke(app, ["schema", "--write", str(made / ".fim" / "schema")]).exit_code == 0
    )
    again = CliRunner().invoke(app, ["validate", "--project", str(made)])
    assert "fim schema --write" not in again.stderr
