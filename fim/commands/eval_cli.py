"""`fim eval`'s command line where a promptfoo user's habits meet it (`EvalCommand`).

- `fim eval merge --help` prints merge's options. `fim eval merge REPORTS...` is `fim
  eval` with `merge` as its first argument (a subcommand would take every suite name for
  a command name), so `--help` there printed eval's help: concurrency, recording, hooks
  and models, none of which merge reads.
- promptfoo's flags fim has elsewhere (`-o` is `--json FILE`) are refused saying where,
  not with click's closest option (`--repeat` got "Possible options: --format"; it is
  now fim's own, overriding the suites' `repeat:`).
- `--threshold` is the change `--baseline` reports; without a baseline it did nothing,
  silently, while a suite's `threshold:` is its pass rate. `--fail-on-untested` likewise
  needs a baseline.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand

from fim.commands.eval_gate import reported

if TYPE_CHECKING:
    from fim.eval.hooks_mode import HooksChoice

MERGE_OPTIONS = (
    "junit",
    "json_out",
    "baseline",
    "threshold",
    "format_",
    "markdown_out",
    "fail_on_skip",
    "fail_on_untested",
    "fail_on_change",
)
"""The parameters of `fim eval` that `fim eval merge` reads (`merge_reports`)."""

MERGE_HELP = (
    "Merge the JSON reports of shards (`fim eval --shard I/N --json FILE`) into one summary, "
    "one JUnit file and one verdict. A report written by `fim eval --rerun-failed` "
    "merges as the later attempt of its cases (flaky: failed, then passed).\n\n"
    "Exits as `fim eval` over every case would: 0 when every suite meets its threshold, 1 "
    "when one does not (or a case regressed against --baseline), 2 when a report cannot be "
    "read."
)

HOOKS_HELP = (
    "Run agents with their hooks, as deployed, or bypass them (default: each suite's "
    "`hooks: on|off`, else bypassed; a run that would execute real tool effects a "
    "PreToolUse hook guards is then refused). --rerun-failed takes the report's mode."
)


def hooks_choice(flag: bool | None, rerun: Path | None) -> HooksChoice:
    """What decides each suite's hooks (`fim.eval.hooks_mode`): `--with-hooks` or
    `--without-hooks` when given, else the modes of the report `--rerun-failed` re-runs
    (a suite that ran with hooks on reruns with them), else each suite's `hooks:`."""
    if flag is not None:
        return flag
    # deferred: loading fim.eval costs hundreds of ms
    from fim.eval.hooks_mode import report_hooks

    return report_hooks(rerun)


def refuse_unguarded(runners: list[Any], console: Any, reports: tuple[Any, ...]) -> None:
    """Exit 2 before any case runs when one would execute real tool effects a PreToolUse
    hook guards with hooks bypassed only by default, each refusal on its own line (and in
    the reports asked for: `reported`)."""
    refused = [*dict.fromkeys(r for runner in runners for r in runner.refusals(runner.plan()))]
    for message in refused:
        console.print(message, markup=False, soft_wrap=True)
    if refused:
        reported(refused, reports)
        raise typer.Exit(2)


ELSEWHERE = {
    "--max-concurrency": "fim calls it --concurrency N",
    "--output": "fim eval writes --json FILE (`--json -`: to stdout), --junit FILE, or "
    "--markdown FILE",
    "-o": "fim eval writes --json FILE (`--json -`: to stdout), --junit FILE, or --markdown FILE",
    "--no-cache": "replaying cassettes is the default; --live calls the models instead",
    "--providers": "fim eval -m ROLE -m ROLE runs each case on every model named",
    "--filter-failing": "fim calls it --rerun-failed REPORT.json (a `fim eval --json` report)",
    "--grader": "judges run on the `fast` role (FIM_FAST_MODEL=MODEL fim eval), or on the "
    "model a check names: `judge: {rubric: ..., model: ROLE}` in the suite",
    "--share": "fim has no hosted viewer: --format markdown (or --markdown FILE) writes a "
    "summary for a PR comment, --json FILE and --junit FILE the reports",
}
"""promptfoo's flags of `promptfoo eval`, and where fim has what they do (said only when
the options a hint names are fim eval's)."""


class EvalCommand(TyperCommand):
    """`fim eval`, with merge's help, promptfoo's flags said in fim's words, and the
    options that mean nothing without another refused."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args[:1] == ["merge"] and any(a in ctx.help_option_names for a in args[1:]):
            self._merge_help(ctx)
        own = {name for param in self.params for name in getattr(param, "opts", [])}
        for arg in args:
            flag = arg.split("=", 1)[0]
            if arg == "--":
                break
            meant = ELSEWHERE.get(flag, "")
            if meant and flag not in own and all(o in own for o in re.findall(r"--[\w-]+", meant)):
                typer.echo(f"error: fim eval has no {flag}: {meant}", err=True)
                ctx.exit(2)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        source = ctx.get_parameter_source("threshold")
        if source is not None and source.name == "COMMANDLINE" and ctx.params["baseline"] is None:
            typer.echo(
                "error: --threshold is the change in latency, tokens or cost --baseline "
                "reports, and there is no --baseline (a suite's pass rate is `threshold:` in "
                "its YAML)",
                err=True,
            )
            ctx.exit(2)
        if ctx.params.get("fail_on_change") is not None:
            _fail_on_change(ctx)
        if ctx.params.get("fail_on_untested") and ctx.params["baseline"] is None:
            typer.echo(
                "error: --fail-on-untested fails on cases that passed in --baseline's report "
                "and were not tested now, and there is no --baseline (--fail-on-skip fails "
                "on every case skipped)",
                err=True,
            )
            ctx.exit(2)
        return super().invoke(ctx)

    def _merge_help(self, ctx: Any) -> None:
        merge = TyperCommand(
            "merge",
            params=[p for p in self.params if p.name in MERGE_OPTIONS],
            help=MERGE_HELP,
            options_metavar="REPORTS... [OPTIONS]",
            context_settings={"help_option_names": ctx.help_option_names},
        )
        name = f"{ctx.command_path} merge"  # as a child, eval's [suites]... would show
        with merge.make_context(name, [], resilient_parsing=True) as sub:
            merge.get_help(sub)  # printed by rich, as every fim help is
        ctx.exit(0)


def _fail_on_change(ctx: Any) -> None:
    """`--fail-on-change METRICS`: known metrics, and a baseline to compare them with
    (exit 2 before any case runs)."""
    # deferred: only --fail-on-change reads the metrics' names
    from fim.errors import RunError
    from fim.eval.baseline import fail_on_metrics

    try:
        fail_on_metrics(ctx.params["fail_on_change"])
    except RunError as exc:
        typer.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    if ctx.params["baseline"] is None:
        typer.echo(
            "error: --fail-on-change fails when a metric rose over --baseline's report, and "
            "there is no --baseline (a `fim eval --json` report of main)",
            err=True,
        )
        ctx.exit(2)


__all__ = [
    "ELSEWHERE",
    "HOOKS_HELP",
    "MERGE_OPTIONS",
    "EvalCommand",
    "hooks_choice",
    "refuse_unguarded",
]
