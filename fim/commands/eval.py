"""`fim eval`: run eval suites, print a summary, write JUnit/JSON, exit 0/1/2 for CI."""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from fim.commands import ProjectOption, load_snapshot, run_async
from fim.errors import RunError


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)


def eval_command(
    ctx: typer.Context,
    suites: Annotated[list[str] | None, typer.Argument(help="Suite names (default: all).")] = None,
    filter_: Annotated[
        list[str] | None,
        typer.Option(
            "--filter", "-k", help="Glob or substring on 'suite/case' (any case); repeatable."
        ),
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
        typer.Option(help="JSON report to compare with; exit 1 when a case regressed."),
    ] = None,
    threshold: Annotated[
        float, typer.Option(help="Latency/tokens/cost change reported against --baseline.")
    ] = 0.2,
    format_: Annotated[
        str, typer.Option("--format", help="Summary on stdout: text or markdown.")
    ] = "text",
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
) -> None:
    """Run eval suites against the compiled project (`fim eval merge` joins shards).

    `fim eval merge REPORTS...` merges the JSON reports of shards.

    Exits 0 when every suite meets its threshold, 1 when one does not (or,
    with --fail-on-skip, when a case was skipped), 2 on bad config, including
    cases that could not run (ERROR: a missing provider key, an MCP command)."""
    # deferred: loading rich costs a few ms
    from rich.console import Console

    if format_ not in ("text", "markdown"):
        Console(stderr=True).print(f"error: --format {format_}: use text or markdown", markup=False)
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
        )

    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.eval.report import print_summary, write_reports
    from fim.eval.runner import EvalRunner, run_models

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
            f"(suites: {_suites_listed(snapshot.evals)})",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(2)

    _check_models(snapshot, models or [], suites or sorted(snapshot.evals), console)

    gc.collect()
    gc.freeze()  # the compiled project lives until exit: keep it out of the GC's scans
    mode: Literal["record", "replay", "live"] = "record" if record else "live" if live else "replay"
    parts = _shard(shard, console)
    # a model named twice runs once; none: each agent on its own model
    chosen: list[str | None] = [*dict.fromkeys(models or [])] or [None]
    runners = [
        EvalRunner(
            snapshot,
            concurrency=concurrency,
            mode=mode,
            with_hooks=with_hooks,
            patterns=filter_ or [],
            suites=suites or None,
            shard=parts,
            model=model,
        )
        for model in chosen
    ]
    total = sum(len(runner.plan()) for runner in runners)
    if total == 0 and shard is None:  # an empty shard is fine: more shards than cases
        message = _nothing_selected(snapshot, suites, filter_)
        console.print(f"error: {message}", markup=False, soft_wrap=True)
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
    comparison = _compare(data, baseline, threshold)
    piped = json_out is not None and str(json_out) == "-"  # promptfoo's `-o -`: the report
    shown = sys.stderr if piped else sys.stdout  # on stdout, what a person reads on stderr
    if format_ == "markdown":
        # deferred: loading fim.eval.ci costs tens of ms
        from fim.eval.ci_markdown import markdown

        shown.write(markdown(data, comparison, fail_on_skip))
    else:
        print_summary(report, Console(highlight=False, stderr=piped))
        if comparison is not None:
            # deferred: loading fim.eval.baseline costs tens of ms
            from fim.eval.baseline import text

            shown.write(text(comparison))
    if piped:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    write_reports(report, junit, None if piped else json_out)
    if report.errored:  # a shard too: no merge can make a case that could not run pass
        raise typer.Exit(2)
    skipped = _skipped(data, fail_on_skip, shard is not None)
    if shard is not None:
        raise typer.Exit(0)
    ok = report.ok and (comparison is None or comparison.ok) and not skipped
    raise typer.Exit(0 if ok else 1)


def _skipped(data: dict[str, Any], fail_on_skip: bool, shard: bool) -> bool:
    """`--fail-on-skip`: whether a case was skipped, said on stderr with their names (a
    shard only notes them: its merge gives the verdict)."""
    # deferred: loading fim.eval.ci costs tens of ms
    from fim.eval.ci import skip_error, skipped_cases

    names = skipped_cases(data) if fail_on_skip else []
    if names:
        line = skip_error(names)
        sys.stderr.write(
            f"note: {line}; `fim eval merge --fail-on-skip` gives the verdict\n"
            if shard
            else f"error: {line}\n"
        )
    return bool(names)


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


def _check_models(snapshot: Any, models: list[str], suites: list[str], console: Any) -> None:
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
        raise typer.Exit(2)


def _shard(text: str | None, console: Any) -> tuple[int, int] | None:
    # deferred: loading fim.eval.ci costs tens of ms
    from fim.eval.ci import parse_shard

    if text is None:
        return None
    try:
        return parse_shard(text)
    except RunError as exc:
        console.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None


def _compare(data: dict[str, Any], baseline: Path | None, threshold: float) -> Any:
    # deferred: loading fim.eval.ci and fim.eval.baseline costs tens of ms
    from fim.eval.baseline import compare
    from fim.eval.ci import load, plain

    if baseline is None:
        return None
    try:
        return compare(data, load(baseline), threshold)
    except RunError as exc:  # may quote a report's names: on one line (`plain`)
        sys.stderr.write(f"error: {plain(str(exc))}\n")
        raise typer.Exit(2) from None


def merge_reports(
    paths: list[Path],
    junit: Path | None,
    json_out: Path | None,
    baseline: Path | None,
    threshold: float,
    format_: str,
    fail_on_skip: bool = False,
) -> None:
    """`fim eval merge`: one JUnit file and one summary from the JSON reports of shards."""

    # deferred: loading fim.eval.ci costs tens of ms
    from fim.eval.ci import exit_code, label, load, merge, plain, rate, verdict
    from fim.eval.ci import junit as junit_xml
    from fim.eval.ci_markdown import markdown

    try:
        merged = merge([load(p) for p in paths])
    except RunError as exc:  # may quote a shard's case names: on one line (`plain`)
        sys.stderr.write(f"error: {plain(str(exc))}\n")
        raise typer.Exit(2) from None
    comparison = _compare(merged, baseline, threshold)
    if format_ == "markdown":
        sys.stdout.write(markdown(merged, comparison, fail_on_skip))
    else:
        for suite in merged["suites"]:  # shards' JSON: any text, kept on its line (`plain`)
            sys.stdout.write(
                f"{plain(label(suite))}: {len(suite['cases'])} cases, "
                f"{rate(suite['pass_rate'])} (threshold {suite['threshold']:.0%}) "
                f"{verdict(suite)}\n"
            )
        replayed = merged.get("cases_replayed", 0)
        if replayed:
            sys.stdout.write(
                f"{replayed} case{'s' if replayed > 1 else ''} replayed from cassettes\n"
            )
        if comparison is not None:
            # deferred: loading fim.eval.baseline costs tens of ms
            from fim.eval.baseline import text

            sys.stdout.write(text(comparison))
    if junit is not None:
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_text(junit_xml(merged), encoding="utf-8")
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(merged, indent=2, default=str), "utf-8")
    code = exit_code(merged, fail_on_skip)
    if code != 2:  # --fail-on-skip: which cases were skipped (none said when it is off)
        _skipped(merged, fail_on_skip, shard=False)
    raise typer.Exit(code if code or comparison is None or comparison.ok else 1)
