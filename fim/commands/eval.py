"""`fim eval`: run eval suites, print a summary, write JUnit/JSON, exit 0/1/2 for CI."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fim.commands import ProjectOption, load_snapshot, run_async


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)


def eval_command(
    ctx: typer.Context,
    suites: Annotated[list[str] | None, typer.Argument(help="Suite names (default: all).")] = None,
    filter_: Annotated[
        list[str] | None,
        typer.Option("--filter", "-k", help="Glob or substring on 'suite/case'; repeatable."),
    ] = None,
    concurrency: Annotated[int, typer.Option(help="Cases run at once.")] = 8,
    record: Annotated[
        bool, typer.Option("--record", help="Call models and store cassettes.")
    ] = False,
    live: Annotated[
        bool,
        typer.Option(
            "--live",
            help="Ignore cassettes; call models. Without it, a case that needs a real model "
            "and has no cassette is skipped.",
        ),
    ] = False,
    with_hooks: Annotated[
        bool, typer.Option("--with-hooks", help="Run agents with their hooks (off by default).")
    ] = False,
    junit: Annotated[Path | None, typer.Option(help="Write JUnit XML here.")] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write a JSON report here.")
    ] = None,
    project: ProjectOption = None,
) -> None:
    """Run eval suites against the compiled project.

    Exits 0 when every suite meets its threshold, 1 when one does not, 2 on bad config."""
    from rich.console import Console

    from fim.eval.report import print_summary, write_reports
    from fim.eval.runner import EvalRunner

    console = Console(stderr=True, highlight=False)
    if record and live:
        console.print("error: --record and --live exclude each other")
        raise typer.Exit(2)
    try:
        snapshot = load_snapshot(ctx, project)
    except typer.Exit:
        raise typer.Exit(2) from None
    unknown = [s for s in suites or [] if s not in snapshot.evals]
    if unknown:
        console.print(
            f"error: unknown eval suite(s): {', '.join(unknown)} "
            f"(suites: {', '.join(sorted(snapshot.evals)) or 'none'})",
            markup=False,
        )
        raise typer.Exit(2)
    import gc

    gc.collect()
    gc.freeze()  # the compiled project lives until exit: keep it out of the GC's scans
    mode = "record" if record else "live" if live else "replay"
    runner = EvalRunner(
        snapshot,
        concurrency=concurrency,
        mode=mode,
        with_hooks=with_hooks,
        patterns=filter_ or [],
        suites=suites or None,
    )
    total = len(runner.plan())
    if total == 0:
        console.print("error: no eval cases selected", markup=False)
        raise typer.Exit(2)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn("eval"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[failed]} failed"),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("eval", total=total, failed=0)
        failed = 0

        def advance(run: object) -> None:
            nonlocal failed
            ok = getattr(run, "passed", False) or getattr(run, "skipped", None)
            failed += 0 if ok else 1
            progress.update(task, advance=1, failed=failed)

        runner.on_progress = advance
        report = run_async(runner.run())
    print_summary(report, Console(highlight=False))
    write_reports(report, junit, json_out)
    raise typer.Exit(0 if report.ok else 1)
