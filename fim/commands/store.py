"""`fim store migrate [--check]`: every table fim can need, made ahead of a deploy by the
tables' owner, so the application's role needs no CREATE at run time (newcomer7 #3).

It makes fim's own tables (the store's migrations, the budget holds among them) and, on
PostgreSQL with the `scale` extra installed, procrastinate's schema and fim's two tables
beside it (`fim.workflows.durable.ensure_schema`). `--check` changes nothing: it lists what
is missing and what the connected role may not do, and exits 1 when anything is, for a
pre-upgrade hook or an init container.

procrastinate records no applied migrations in the database: its API applies the whole
schema to an empty database (`SchemaManager.apply_schema`) and ships the SQL of each
version's migration (`SchemaManager.get_migrations_path`) for the user's migration tool.
So a queue schema that an older procrastinate made is detected here (a function the
installed schema defines is absent) and reported with where its migrations are, never
applied by guessing which of them already ran.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fim.commands import (
    ProjectOption,
    err,
    fail,
    print_problems,
    project_dir,
    run_async,
    user_errors,
)
from fim.commands.approvals import StateOption

if TYPE_CHECKING:
    from fim.store import Store
    from fim.store.engine import Database


def register(app: typer.Typer) -> None:
    store = typer.Typer(
        name="store",
        help="Create and migrate the state store's tables ahead of a deploy; check them.",
        no_args_is_help=True,
    )
    store.command("migrate")(migrate)
    app.add_typer(store, name="store")


def migrate(
    ctx: typer.Context,
    state: StateOption = None,
    project: ProjectOption = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Change nothing: list what is missing and what this role may not do; "
            "exit 1 if anything is.",
        ),
    ] = False,
) -> None:
    """Create and migrate every table fim needs in the state store (run it as their owner).

    fim's tables and budget holds; on PostgreSQL with the scale extra, the job queue's
    (procrastinate's) too. The application's role then needs only SELECT, INSERT, UPDATE,
    DELETE on the tables and USAGE, SELECT, UPDATE on the sequences (docs/scale-out.md)."""
    db = _open(ctx, project, state)
    try:
        if check:
            problems, notes = _check(db)
            for line in notes:
                err(f"note: {line}")
            if problems:
                for line in problems:
                    err(line)
                fail(
                    f"state store {db.display_url} is not ready for this fim "
                    f"({len(problems)} problem{'s' * (len(problems) != 1)})",
                    "run `fim store migrate` as the tables' owner; grant the application's "
                    "role DML (docs/scale-out.md)",
                )
            typer.echo(f"ok: state store {db.display_url} has every table fim needs")
            return
        done = _migrate(db)
        typer.echo(f"ok: state store {db.display_url} migrated: {', '.join(done)}")
    finally:
        db.close()


def _open(ctx: typer.Context, project: Path | None, state: str | None) -> Store:
    """The store to migrate or check: `--state`, else fim.yaml's `state:`, which must be set
    here: an unset `${FIM_STATE_URL}` is an error, not the local default other commands fall
    back to (`fim.config.serving.store_required`)."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.config.loader import PROJECT_FILE, find_root, load
    from fim.config.serving import store_required
    from fim.store import Store

    if state:
        return Store(state, root=Path.cwd())
    with user_errors():
        root = find_root(project_dir(ctx, project))
        decls = load(root)
    if not decls.project_ok:
        print_problems(p for p in decls.problems if p.path.endswith(PROJECT_FILE))
        fail(f"cannot read the state URL from {root / PROJECT_FILE}", "fix fim.yaml first")
    unset = store_required(decls.project, "fim store migrate")
    if unset is not None:
        print_problems([unset])
        raise typer.Exit(1)
    return Store(decls.project.state, root=root)


# --------------------------------------------------------------------------- migrate


@contextmanager
def _one_line(db: Database) -> Iterator[None]:
    """A store that cannot be used ends the command with one line naming it (password
    masked) and what to do; any other error is fim's own and raised."""
    # deferred: loading fim.store costs a few ms
    from fim.store.health import start_error, store_failure

    try:
        yield
    except Exception as exc:
        line = store_failure(exc)
        if line is None:
            raise
        error = start_error(db, line)
        fail(error.message, error.hint)


def _migrate(db: Database) -> list[str]:
    """Apply everything; what was made, for the closing line. A failure ends the command
    with one line."""
    # deferred: loading fim.store costs a few ms
    from fim.store.schema import MIGRATIONS

    with _one_line(db):
        db.open()  # fim's migrations, the budget holds' table among them
    done = [f"fim schema version {len(MIGRATIONS)}"]
    if db.is_sqlite or not _queue_installed():
        return done
    with user_errors():
        pending = run_async(_migrate_queue(db))
    if pending:
        for line in pending:
            err(line)
        fail(*_queue_outdated())
    done.append(f"job queue (procrastinate {_queue_version()})")
    return done


async def _migrate_queue(db: Database) -> list[str]:
    """procrastinate's schema and fim's tables beside it; what is still pending after."""
    # deferred: loading procrastinate costs hundreds of ms
    from fim.workflows.durable import ensure_schema, make_app

    app = make_app(db.url)
    try:
        async with app.open_async():
            await ensure_schema(app)
    except Exception as exc:
        raise _queue_error(db, exc) from None
    return _queue_pending(db)


def _queue_error(db: Database, exc: Exception) -> Exception:
    # deferred: loading fim.store costs a few ms
    from fim.store.health import start_error, store_failure

    line = store_failure(exc)
    return start_error(db, f"job queue: {line}") if line is not None else exc


def start_queue(db: Database) -> Callable[[Any], Awaitable[None]]:
    """For `fim worker`: a coroutine function making the queue's schema on its open app, a
    store failure raised as one `RunError` line naming the store."""

    async def ensure(app: Any) -> None:
        # deferred: loading procrastinate costs hundreds of ms
        from fim.workflows.durable import ensure_schema

        try:
            await ensure_schema(app)
        except Exception as exc:
            raise _queue_error(db, exc) from None

    return ensure


# --------------------------------------------------------------------------- check


def _check(db: Database) -> tuple[list[str], list[str]]:
    """(problems, notes) of the store, read only."""
    # deferred: loading fim.store costs a few ms
    from fim.store.health import inspect

    with _one_line(db):
        found = inspect(db)
        queue = [] if db.is_sqlite or not _queue_installed() else _queue_pending(db)
    role = "this role" if db.is_sqlite else "the role"
    problems = [f"missing: {what}" for what in found.missing + queue]
    problems += [f"{role} may not: {what}" for what in found.privileges]
    if (found.missing or queue) and not found.can_create:
        problems.append(f"{role} may not create tables (so it cannot make what is missing)")
    return problems, found.notes


def _queue_installed() -> bool:
    try:
        # deferred: the scale extra is optional
        import procrastinate  # noqa: F401
    except ImportError:
        return False
    return True


def _queue_version() -> str:
    # deferred: only asked when procrastinate is installed
    from importlib.metadata import version

    return version("procrastinate")


def _queue_objects() -> tuple[list[str], list[str]]:
    """The tables and functions the installed procrastinate's schema defines."""
    # deferred: the scale extra is optional
    from procrastinate.schema import SchemaManager

    sql = SchemaManager.get_schema()
    tables = re.findall(r"^CREATE TABLE (?:public\.)?(\w+)", sql, re.MULTILINE)
    functions = re.findall(
        r"^CREATE (?:OR REPLACE )?FUNCTION (?:public\.)?(\w+)", sql, re.MULTILINE
    )
    return tables, sorted(set(functions))


def _queue_pending(db: Database) -> list[str]:
    """What the queue lacks: its tables (never made), or functions the installed
    procrastinate defines (its schema is older: migrations pending), and fim's tables."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import create_engine, text

    # deferred: the scale extra is optional
    from fim.workflows.queue_rows import TABLES

    tables, functions = _queue_objects()
    ours = [re.search(r"EXISTS (\w+)", statement).group(1) for statement in TABLES]  # type: ignore[union-attr]
    engine = create_engine(db.url)
    try:
        with engine.connect() as conn:
            absent = [
                name
                for name in [*tables, *ours]
                if conn.execute(text("SELECT to_regclass(:n)"), {"n": name}).scalar() is None
            ]
            present = set(
                conn.execute(
                    text("SELECT proname FROM pg_proc WHERE proname = ANY(:names)"),
                    {"names": functions},
                ).scalars()
            )
    finally:
        engine.dispose()
    if any(name in tables for name in absent):
        return ["the job queue's schema (procrastinate's tables and fim_workers)"]
    lacking = [name for name in functions if name not in present]
    pending = [f"table {name}" for name in absent]
    if lacking:
        pending.append(
            f"procrastinate {_queue_version()}'s migrations: its schema here is older "
            f"(no {', '.join(lacking[:3])}{' ...' if len(lacking) > 3 else ''})"
        )
    return pending


def _queue_outdated() -> tuple[str, str]:
    # deferred: the scale extra is optional
    from procrastinate.schema import SchemaManager

    folder = Path(SchemaManager.get_migrations_path())
    return (
        "the job queue's schema was made by an older procrastinate and procrastinate "
        "records no applied migrations, so fim does not apply them",
        f"apply, as the owner, the files of {folder} newer than the procrastinate that "
        "made it, in order (procrastinate's docs: migrations), then run this again",
    )
