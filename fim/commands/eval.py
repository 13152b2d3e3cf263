"""`fim eval`: run eval suites, print a summary, write JUnit/JSON, exit 0/1/2 for CI."""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from fim.commands import ProjectOption, run_async
from fim.commands.eval_cli import HOOKS_HELP, EvalCommand, hooks_choice, refuse_unguarded
from fim.commands.eval_gate import compiled, reported, rerun_of, shard_of
from fim.commands.eval_merge import (
    compare_to,
    merge_reports,
    untested_failed,
    untested_said,
    write_markdown,
)
from fim.errors import ProjectNotFound, RunError
from fim.stdout_guard import answer_stdout, claim_stdout
from fim.terminal import rich_console


def register(app: typer.Typer) -> None:
    app.command("eval", cls=EvalCommand)(eval_command)


def eval_command(
    ctx: typer.Context,
    suites: Annotated[list[str] | None, typer.Argument(help="Suite names (default: all).")] = None,
    filter_: Annotated[
        list[str] | None,
        typer.Option(
            "--filter", "-k", help="Glob or substring on 'suite/case' (any case); repeatable."
        ),
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Cases run at once.")] = 8,
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
        bool | None, typer.Option("--with-hooks/--without-hooks", help=HOOKS_HELP)
    ] = None,
    junit: Annotated[Path | None, typer.Option(help="Write JUnit XML here.")] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write a JSON report here (- : to stdout).")
    ] = None,
    project: ProjectOption = None,
    shard: Annotated[
        str | None,
        typer.Option(
            help="Run only shard I of N (I/N, a stable partition by case id); the verdict "
            "is left to `fim eval merge` (exit 0 unless the config is bad).",
        ),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            help="JSON report to compare with (a `fim eval --json` of main); exit 1 when a "
            "case that passed there fails now, or with --fail-on-change when a metric rose "
            "past --threshold. Latency, tokens and cost changes past --threshold are listed."
        ),
    ] = None,
    threshold: Annotated[
        float,
        typer.Option(
            help="Relative change (0.2: 20%) of a case's latency, tokens or cost that "
            "--baseline lists, and that fails the gate for --fail-on-change's metrics."
        ),
    ] = 0.2,
    fail_on_change: Annotated[
        str | None,
        typer.Option(
            "--fail-on-change",
            metavar="METRICS",
            help="With --baseline: exit 1 when a case's cost, tokens or latency rose more "
            "than --threshold over the baseline; any of cost, tokens and latency, "
            "comma-separated. Two replayed runs compare the recorded latency; scripted "
            "cases' own time is not compared.",
        ),
    ] = None,
    repeat: Annotated[
        int | None,
        typer.Option(
            "--repeat",
            min=1,
            help="Run every selected case N times, instead of the `repeat:` of its suite's "
            "YAML (a nightly job's flakiness run).",
        ),
    ] = None,
    format_: Annotated[
        str, typer.Option("--format", help="Summary on stdout: text or markdown.")
    ] = "text",
    markdown_out: Annotated[
        Path | None,
        typer.Option(
            "--markdown",
            help="Write the Markdown summary here too (a CI job summary or PR comment; no "
            "`| tee` needed).",
        ),
    ] = None,
    models: Annotated[
        list[str] | None,
        typer.Option(
            "--model",
            "-m",
            help="Run each agent suite's agent on this model (a role or litellm string) "
            "instead of its own; repeatable: every case runs once per model.",
        ),
    ] = None,
    fail_on_skip: Annotated[
        bool,
        typer.Option(
            "--fail-on-skip",
            help="Exit 1 when a case was skipped (no cassette: never tested), naming it. "
            "With --shard, the verdict is `fim eval merge --fail-on-skip`'s.",
        ),
    ] = False,
    fail_on_untested: Annotated[
        bool,
        typer.Option(
            "--fail-on-untested",
            help="With --baseline: exit 1 when a case that passed in the baseline was not "
            "tested now (skipped, or not in this run), naming it. New cases without a "
            "cassette do not fail it (--fail-on-skip does).",
        ),
    ] = False,
    rerun_failed: Annotated[
        Path | None,
        typer.Option(
            "--rerun-failed",
            help="Run only the cases that failed or errored in this JSON report (`fim eval "
            "--json`), by exact name, each on the model it failed on (or on --model's).",
        ),
    ] = None,
) -> None:
    """Run eval suites against the compiled project (`fim eval merge` joins shards).

    `fim eval merge REPORTS...` merges the JSON reports of shards.

    Exits 0 when every suite meets its threshold (a case marked `xfail:` counts
    neither way), 1 when one does not, when no
    case was evaluated (all skipped), or with --fail-on-skip when a case was
    skipped; 2 on bad config, including cases that could not run (ERROR: a
    missing provider key, an MCP command)."""

    if format_ not in ("text", "markdown"):
        rich_console(stderr=True).print(
            f"error: --format {format_}: use text or markdown", markup=False
        )
        raise typer.Exit(2)
    if suites and suites[0] == "merge" and len(suites) > 1:
        merge_reports(
            [Path(p) for p in suites[1:]],
            junit,
            json_out,
            baseline,
            threshold,
            format_,
            fail_on_skip,
            markdown_out,
            fail_on_untested,
            fail_on_change,
        )

    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.eval.attempts import AttemptsRunner
    from fim.eval.report import print_summary, write_reports
    from fim.eval.runner import EvalRunner, run_models

    console = rich_console(stderr=True, highlight=False)
    if record and live:
        console.print("error: --record and --live exclude each other")
        raise typer.Exit(2)
    if json_out is not None and str(json_out) == "-":
        claim_stdout()  # the report alone on stdout: any other write there is a print
    if suites == ["merge"] and _no_project(ctx, project):
        console.print(f"error: {NO_REPORTS}", markup=False, soft_wrap=True)
        raise typer.Exit(2)
    reports = (junit, json_out, markdown_out, "record" if record else "live" if live else "replay")
    try:
        snapshot = compiled(ctx, project, reports)
    except typer.Exit:
        raise typer.Exit(2) from None
    suites = [snapshot.named("eval", s) for s in suites] if suites else suites  # evals/x.yaml
    unknown = [s for s in suites or [] if s not in snapshot.evals]
    if unknown == ["merge"]:  # no suite is named merge: the shards' reports were forgotten
        console.print(f"error: {NO_REPORTS}", markup=False, soft_wrap=True)
        raise typer.Exit(2)
    if unknown:
        # deferred: only a suite not found asks why (a .json file: ADK's eval set, a report)
        from fim.commands.project_adk_evals import not_a_suite

        reasons = [r for r in map(not_a_suite, unknown) if r is not None]
        for reason in reasons:
            console.print(f"error: {reason}", markup=False, soft_wrap=True)
        if not reasons:
            reasons = [
                f"unknown eval suite(s): {', '.join(unknown)} "
                f"(suites: {_suites_listed(snapshot.evals)})"
            ]
            console.print(f"error: {reasons[0]}", markup=False, soft_wrap=True)
        reported(reasons, reports)
        raise typer.Exit(2)

    # a model named twice runs once; none: each agent on its own model
    chosen: list[str | None] = [*dict.fromkeys(models or [])] or [None]
    if repeat is not None and rerun_failed is not None:
        console.print(
            "error: --repeat with --rerun-failed: a rerun runs again the attempts that failed "
            "(run `fim eval --repeat N` on its own for more samples)",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(2)
    rerun = rerun_of(rerun_failed, snapshot, suites, chosen, console, reports)
    only = None if rerun is None else rerun[0]
    if only is not None and not models:
        chosen = list(only)
    named = [m for m in chosen if m is not None]
    _check_models(snapshot, named, suites or sorted(snapshot.evals), console, reports)

    gc.collect()
    gc.freeze()  # the compiled project lives until exit: keep it out of the GC's scans
    mode: Literal["record", "replay", "live"] = "record" if record else "live" if live else "replay"
    parts = shard_of(shard, console, reports)
    runners: list[EvalRunner] = [
        AttemptsRunner(
            snapshot,
            concurrency=concurrency,
            mode=mode,
            with_hooks=hooks_choice(with_hooks, rerun_failed),
            patterns=filter_ or [],
            suites=suites or None,
            shard=parts,
            model=model,
            only=None if only is None else only[model],
            repeat=repeat,
            attempts=None if rerun is None else rerun[1][model],
        )
        for model in chosen
    ]
    refuse_unguarded(runners, console, reports)  # real tool effects a bypassed hook guards
    total = sum(len(runner.plan()) for runner in runners)
    if total == 0 and shard is None:  # an empty shard is fine: more shards than cases
        message = _nothing_selected(snapshot, suites, filter_)
        console.print(f"error: {message}", markup=False, soft_wrap=True)
        reported([message], reports)
        raise typer.Exit(2)
    # deferred: loading rich costs a few ms
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

        for runner in runners:
            runner.on_progress = advance
        report = run_async(run_models(runners))
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.eval.report import json_report

    data = json_report(report)
    # which shard this is (null: the whole run): the merge checks every one of 1..N is there
    data["shard"] = None if parts is None else {"index": parts[0], "total": parts[1]}
    # the report --rerun-failed re-ran: `fim eval merge` takes this one as the later attempt
    data["rerun"] = None if rerun_failed is None else str(rerun_failed)
    comparison = compare_to(data, baseline, threshold, fail_on_change)
    # the comparison in the report: a CI step reads `baseline.ok`, `changes[]` (newcomer55 #4)
    data["baseline"] = None if comparison is None else comparison.as_dict()
    piped = json_out is not None and str(json_out) == "-"  # promptfoo's `-o -`: the report
    shown = sys.stderr if piped else sys.stdout  # on stdout, what a person reads on stderr
    if format_ == "markdown" or markdown_out is not None:
        # deferred: loading fim.eval.ci costs tens of ms
        from fim.eval.ci_markdown import markdown

        summary = markdown(data, comparison, fail_on_skip, fail_on_untested)
        write_markdown(markdown_out, summary)
    if format_ == "markdown":
        shown.write(summary)
    else:
        print_summary(report, rich_console(highlight=False, stderr=piped))
        if comparison is not None:
            # deferred: loading fim.eval.baseline costs tens of ms
            from fim.eval.baseline import text

            shown.write(text(comparison))
    if piped:
        answer_stdout().write(json.dumps(data, indent=2, default=str) + "\n")
    write_reports(report, junit, None if piped else json_out, data)
    if report.errored:  # a shard too: no merge can make a case that could not run pass
        raise typer.Exit(2)
    skipped = untested_said(data, fail_on_skip, shard is not None)
    if shard is not None:
        raise typer.Exit(0)
    gone = untested_failed(comparison, fail_on_untested)
    ok = report.ok and (comparison is None or comparison.ok) and not skipped and not gone
    raise typer.Exit(0 if ok else 1)


NO_REPORTS = (
    "fim eval merge: no reports given (name the shards' JSON reports: fim eval merge "
    "shard-1.json shard-2.json ..., as `fim eval --shard I/N --json FILE` wrote them)"
)


def _no_project(ctx: Any, project: Path | None) -> bool:
    """No fim.yaml here: `fim eval merge` alone is merge without its reports, not a suite."""
    # deferred: only `fim eval merge` without reports asks
    from fim.commands import project_dir
    from fim.config.loader import find_root

    try:
        find_root(project_dir(ctx, project))
    except ProjectNotFound:
        return True
    return False


def _nothing_selected(snapshot: Any, suites: list[str] | None, patterns: list[str] | None) -> str:
    """Why no case runs, with what `-k` could have meant (as `fim eval nosuchsuite` lists
    the suites): the closest `suite/case` names, then every suite."""
    # deferred: fim.eval.runner loads fim.config.schema (hundreds of ms); only on this error
    from fim.eval.runner import near_misses

    if not patterns:
        return "no eval cases selected"
    evals = {n: s for n, s in snapshot.evals.items() if not suites or n in suites}
    close = near_misses(evals, patterns)
    meant = f"did you mean {' or '.join(repr(n) for n in close)}? " if close else ""
    return (
        f"no eval cases match -k {' -k '.join(repr(p) for p in patterns)} "
        f"({meant}suites: {_suites_listed(evals)})"
    )


def _suites_listed(evals: Any) -> str:
    """The suites with how many cases each holds (`math (2 cases), tips (1 case)`): what
    a `-k` or a suite name could have picked, and how much of it."""
    listed = []
    for name in sorted(evals):
        count = len(evals[name].cases)
        listed.append(f"{name} ({count} case{'' if count == 1 else 's'})")
    return ", ".join(listed) or "none"


def _check_models(
    snapshot: Any, models: list[str], suites: list[str], console: Any, reports: tuple[Any, ...]
) -> None:
    """`--model`: each must name a role of fim.yaml or a litellm model, and it replaces the
    model of an agent, so a workflow suite (whose models are its nodes') cannot take it.
    Every problem at once, exit 2, before any case runs."""
    if not models:
        return
    problems = []
    for model in dict.fromkeys(models):
        try:
            snapshot.model_settings(model)
        except RunError as exc:
            problems.append(f"--model {model}: {exc}")
    flows = [name for name in suites if snapshot.evals[name].workflow is not None]
    if flows:
        agents = sorted(n for n in snapshot.evals if snapshot.evals[n].workflow is None)
        problems.append(
            f"--model applies to agent suites; {', '.join(flows)} "
            f"{'runs a workflow' if len(flows) == 1 else 'run workflows'} "
            f"(name the agent suites: fim eval {' '.join(agents) or 'SUITE'} --model ...)"
        )
    for problem in problems:
        console.print(f"error: {problem}", markup=False, soft_wrap=True)
    if problems:
        reported(problems, reports)
        raise typer.Exit(2)
