"""Shell completion of `fim`'s arguments (`fim --install-completion`, then TAB): agent names
for `fim run`, workflow names for `fim workflow run`, run ids for `fim runs show`, pending
approval ids for `fim approvals approve|deny` (the kinds of `fim list|show|schema` are
completed by `fim.commands.declarations`, the one module those commands load).

A TAB must answer at once, so nothing here compiles the project or loads the state store's
libraries: names are the YAML files of the nearest project's folders (`agents/*.yaml`),
ids are read with the standard library's sqlite3 from a SQLite `state:` (a PostgreSQL
store, or a `state:` this cannot read without fim.yaml's whole parser, completes no ids).
Every failure completes nothing: a broken project must not break the shell.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import typer

from fim.store_url import canonical

PROJECT_FILE = "fim.yaml"
DEFAULT_STATE = "sqlite:///.fim/state.db"
"""fim.yaml's `state:` when it has none (`fim.config.schema.project.Project.state`)."""

RUNS_TABLE = "fim_runs"
APPROVALS_TABLE = "fim_approvals"
"""The store's tables (`fim.store.schema`), named here: importing the schema loads SQLAlchemy."""

MAX_IDS = 50
"""The most ids offered, newest first."""

_STATE = re.compile(r"^state:[ \t]*(.*?)[ \t]*(?:#.*)?$", re.MULTILINE)
_VARIABLE = re.compile(r"\$\{(\w+)(?::?-(.*))?\}")


def project_root(ctx: Any) -> Path | None:
    """The project a command would use (`ctx`: the command's click context, or None): its
    `--project`, fim's own `--project`, else the nearest folder up from here with fim.yaml."""
    while ctx is not None:
        given = ctx.params.get("project")
        if given:
            root = Path(given).expanduser()
            return root if (root / PROJECT_FILE).is_file() else None
        ctx = ctx.parent
    here = Path.cwd()
    return next((d for d in (here, *here.parents) if (d / PROJECT_FILE).is_file()), None)


def declared(ctx: typer.Context | None, folder: str) -> list[str]:
    """The names of the YAML files in `folder` of the project, sorted (not compiled: a
    file that does not validate is still offered)."""
    root = project_root(ctx)
    if root is None:
        return []
    try:
        entries = list(os.scandir(root / folder))
    except OSError:
        return []
    names = {
        entry.name.rsplit(".", 1)[0]
        for entry in entries
        if entry.name.endswith((".yaml", ".yml")) and not entry.name.startswith(".")
    }
    return sorted(name for name in names if "." not in name)


def _starting(words: Iterable[str], incomplete: str) -> list[str]:
    return [word for word in words if word.startswith(incomplete)]


def complete_agent(ctx: typer.Context, incomplete: str) -> list[str]:
    """The agents of the project (`agents/*.yaml`)."""
    return _starting(declared(ctx, "agents"), incomplete)


def complete_workflow(ctx: typer.Context, incomplete: str) -> list[str]:
    """The workflows of the project (`workflows/*.yaml`)."""
    return _starting(declared(ctx, "workflows"), incomplete)


def complete_run_id(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """`last` and the ids of the newest runs, each with its kind, name and status."""
    rows = _query(
        ctx,
        f"SELECT id, kind, name, status FROM {RUNS_TABLE} WHERE id LIKE ? ESCAPE '\\' "
        "ORDER BY created_at DESC LIMIT ?",
        incomplete,
    )
    found = [(str(r[0]), f"{r[1]} {r[2]}, {r[3]}") for r in rows]
    return ([("last", "the newest run")] if "last".startswith(incomplete) else []) + found


def complete_approval_id(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """The ids of the pending approvals, each with its agent and tool."""
    rows = _query(
        ctx,
        f"SELECT id, agent, tool_name FROM {APPROVALS_TABLE} WHERE id LIKE ? ESCAPE '\\' "
        "AND status = 'pending' ORDER BY created_at DESC LIMIT ?",
        incomplete,
    )
    return [(str(r[0]), f"{r[1]}: {r[2]}") for r in rows]


def _query(ctx: typer.Context, sql: str, incomplete: str) -> list[Any]:
    path = state_file(ctx)
    if path is None or not path.is_file():
        return []
    like = re.sub(r"([\\%_])", r"\\\1", incomplete) + "%"
    # deferred: loading sqlite3 costs a few ms of every command that imports this module
    import sqlite3

    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=0.2)
    except (sqlite3.Error, ValueError, OSError):
        return []
    try:
        return list(db.execute(sql, (like, MAX_IDS)))
    except sqlite3.Error:  # no such table yet, a locked or broken file
        return []
    finally:
        db.close()


def state_file(ctx: typer.Context) -> Path | None:
    """The SQLite file of the store: `--state` (relative to this folder, as it is opened),
    else fim.yaml's `state:` (a plain URL, or one `${VAR}` / `${VAR:-default}`; relative to
    the project), else the default; None for any other store."""
    url = _given(ctx, "state")
    base = Path.cwd()
    if url is None:
        root = project_root(ctx)
        url = _project_state(root) if root is not None else None
        if root is None or url is None:
            return None
        base = root
    url = canonical(url)  # `SQLite:///` too (fim.store_url)
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///") :].partition("?")[0]
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    return Path(path) if os.path.isabs(path) else base / path


def _project_state(root: Path) -> str | None:
    try:
        text = (root / PROJECT_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = _STATE.search(text)
    url = found.group(1).strip("'\"") if found else DEFAULT_STATE
    variable = _VARIABLE.fullmatch(url)
    if variable is not None:
        return os.environ.get(variable.group(1)) or variable.group(2) or ""
    return None if "${" in url else url


def _given(ctx: Any, name: str) -> str | None:
    while ctx is not None:
        value = ctx.params.get(name)
        if value:
            return str(value)
        ctx = ctx.parent
    return None
