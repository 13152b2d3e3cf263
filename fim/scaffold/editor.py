"""Editor set-up `fim init` writes: the JSON Schemas of fim's files in `.fim/schema/`, and
VS Code's `yaml.schemas` setting (Red Hat YAML extension) pointing the project's YAML files
at them, so a newcomer's first edit gets completion, hover docs and errors.

Why `.fim/schema/` (ignored by git, as all of `.fim/` is) rather than committed files:
the schemas are a function of the installed fim, not of the project. Committed, they
would go stale on every upgrade of fim and put 100 KB of generated JSON in diffs; in
`.fim/` each checkout regenerates its own with `fim schema --write .fim/schema`, which
`fim init` prints. fim publishes no schema URL to reference instead, and a URL could not
follow the installed version either.

`.vscode/settings.json` is the user's file: it is written only when absent; when present
and plain JSON, only `yaml.schemas` entries are added (an entry already there is kept);
otherwise (VS Code also accepts comments and trailing commas, JSONC) it is left as it is
and the caller says what to add.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fim.config.files import LinkRefused, write_inside
from fim.private import FOLDER, parents

SCHEMA_DIR = f"{FOLDER}/schema"
"""Where `fim init` writes the schemas, relative to the project root."""

SCHEMA_GLOBS: dict[str, list[str]] = {
    "project": ["fim.yaml"],
    "agent": ["agents/*.yaml", "agents/*.yml"],
    "connector": ["connectors/*.yaml", "connectors/*.yml"],
    "workflow": ["workflows/*.yaml", "workflows/*.yml"],
    "hook": ["hooks/*.yaml", "hooks/*.yml"],
    "eval": ["evals/*.yaml", "evals/*.yml", "!evals/*.*.yaml", "!evals/*.*.yml"],
}
"""The files of each kind, as `yaml.schemas` globs relative to the workspace root. A skill
is SKILL.md front matter, which a YAML schema cannot be attached to; `evals/<name>.<tag>
.yaml` (a scripted model's replies, a cassette) is data, not a suite: left out with `!`
where the extension reads exclusions (elsewhere such a pattern matches nothing)."""

SETTINGS = Path(".vscode") / "settings.json"


def write_schemas(root: Path) -> list[Path]:
    """Write every kind's JSON Schema into `root/.fim/schema/`, replacing older ones."""
    # deferred: fim.config.export loads the schema models (hundreds of ms); only init needs it
    from fim.config.export import SCHEMA_KINDS, json_schema, schema_filename

    if (root / FOLDER).is_symlink():  # nothing made or narrowed where a checkout's link points
        raise LinkRefused(root / FOLDER)
    written = []
    for kind in SCHEMA_KINDS:
        if kind not in SCHEMA_GLOBS:
            continue
        path = root / SCHEMA_DIR / schema_filename(kind)
        parents(path)
        write_inside(root, path, json.dumps(json_schema(kind), indent=2) + "\n")
        written.append(path)
    return written


def schema_setting() -> dict[str, list[str]]:
    """The `yaml.schemas` value: schema path (relative to the project) -> its files."""
    # deferred: fim.config.export loads the schema models (hundreds of ms); only init needs it
    from fim.config.export import schema_filename

    return {f"{SCHEMA_DIR}/{schema_filename(kind)}": globs for kind, globs in SCHEMA_GLOBS.items()}


def vscode_settings(root: Path) -> tuple[str, bool]:
    """Add `yaml.schemas` to `root/.vscode/settings.json`: (what was done, whether the
    setting is now there; False: the file was left alone, the message says why)."""
    path = root / SETTINGS
    wanted = schema_setting()
    if path.is_symlink() or path.parent.is_symlink():
        link = SETTINGS if path.is_symlink() else SETTINGS.parent
        return f"{link} is a symlink; left as it is", False
    if path.exists():
        try:
            current: Any = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            why = "is not plain JSON" if isinstance(exc, ValueError) else "cannot be read"
            return f"{SETTINGS} {why}; left as it is", False
        schemas = current.get("yaml.schemas", {}) if isinstance(current, dict) else None
        if not isinstance(schemas, dict):
            return f"{SETTINGS} has no yaml.schemas mapping to add to; left as it is", False
        added = {k: v for k, v in wanted.items() if k not in schemas}
        if not added:
            return f"{SETTINGS} already maps fim's schemas", True
        current["yaml.schemas"] = {**schemas, **added}
        write_inside(root, path, json.dumps(current, indent=2) + "\n")
        return f"added fim's schemas to yaml.schemas in {SETTINGS}", True
    write_inside(root, path, json.dumps({"yaml.schemas": wanted}, indent=2) + "\n")
    return f"wrote {SETTINGS}", True


__all__ = ["SCHEMA_DIR", "SCHEMA_GLOBS", "schema_setting", "vscode_settings", "write_schemas"]
