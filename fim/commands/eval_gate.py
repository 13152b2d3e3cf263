"""`fim eval`'s set-up before cases run, where a CI gate meets it: the project compiled (its
problems written into the reports asked for, newcomer55 #8), `--shard`, and the attempts
`--rerun-failed` runs again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from fim.errors import RunError


def reported(problems: list[Any], reports: tuple[Any, ...]) -> None:
    """The problems that stop the run (exit 2) in the reports asked for."""
    if any(r is not None for r in reports[:3]):
        # deferred: only a run the configuration stops writes these
        from fim.eval.config_report import write_config_error

        write_config_error(problems, *reports)


def compiled(ctx: Any, project: Path | None, reports: tuple[Any, ...]) -> Any:
    """`load_snapshot`, and when the project does not compile, its problems written into
    the reports asked for (`fim.eval.config_report`): the CI reporters say why (exit 2)."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.build.compile import compile_project
    from fim.commands import project_dir, user_errors, warn_store_fallback
    from fim.errors import ConfigError

    with user_errors():
        try:
            snapshot = compile_project(project_dir(ctx, project))
        except ConfigError as exc:
            reported([*exc.problems], reports)
            raise
        warn_store_fallback(snapshot.project)
        return snapshot


def shard_of(text: str | None, console: Any, reports: tuple[Any, ...]) -> tuple[int, int] | None:
    """`--shard I/N` as (I, N); a bad one said, in the reports asked for too, exit 2."""
    # deferred: loading fim.eval.ci costs tens of ms
    from fim.eval.ci import parse_shard

    if text is None:
        return None
    try:
        return parse_shard(text)
    except RunError as exc:
        console.print(f"error: {exc}", markup=False)
        reported([str(exc)], reports)
        raise typer.Exit(2) from None


def rerun_of(
    path: Path | None,
    snapshot: Any,
    suites: list[str] | None,
    chosen: list[str | None],
    console: Any,
    reports: tuple[Any, ...],
) -> tuple[dict[str | None, set[tuple[str, str]]], dict[str | None, Any]] | None:
    """`--rerun-failed`: per model to run, the (suite, case) names that failed in the
    report (`fim.eval.rerun`), and of each the attempts that failed (only those run
    again); None without the option. With `--model`, every failed case runs on each model
    named. Says what it cannot find (an unreadable report: exit 2, in the reports asked
    for too); exits 0 when nothing failed."""
    if path is None:
        return None
    # deferred: loading fim.eval.ci costs tens of ms
    from fim.eval.rerun import NothingFailed, failed_cases

    try:
        found = failed_cases(path, snapshot.evals, suites)
    except NothingFailed as exc:
        console.print(f"note: {exc}", markup=False, soft_wrap=True)
        raise typer.Exit(0) from None
    except RunError as exc:
        console.print(f"error: {exc}", markup=False, soft_wrap=True)
        reported([str(exc)], reports)
        raise typer.Exit(2) from None
    if found.gone:
        console.print(
            f"note: {len(found.gone)} failed case(s) of {path} not in this project (renamed or "
            f"removed): {', '.join(found.gone[:5])}",
            markup=False,
            soft_wrap=True,
        )
    if chosen != [None]:
        every, numbers = found.union(), found.every_attempt()
        return {model: every for model in chosen}, {model: numbers for model in chosen}
    models = found.models()
    return {m: found.only(m) for m in models}, {m: found.attempts(m) for m in models}
