"""`fim runs rerun ID` and `fim runs save-case ID`: act on a stored run (newcomer-53 #7).

`rerun` runs the run's agent on the run's input again, on the project as it is now, as
`fim run AGENT "INPUT"` would (no session unless `--session`), so "fix the tool, run that
same input again" needs no copying. `save-case` appends the run to the agent's eval suite
as a case (`fim.commands.runs_case`), refusing a run of an agent this project does not
have. `POST /v1/runs/{id}/rerun` is the first over HTTP.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fim.commands import ProjectOption, fail, project_dir, user_errors
from fim.commands.approvals import StateOption, _run, open_store
from fim.commands.completion import complete_run_id
from fim.commands.run_ids import resolve_run

if TYPE_CHECKING:
    from fim.store import Store
    from fim.store.records import RunRecord

RunId = Annotated[
    str,
    typer.Argument(
        help="The run's id, a unique start of it, or `last` (the newest run).",
        autocompletion=complete_run_id,
    ),
]


def rerun(
    ctx: typer.Context,
    run_id: RunId,
    session: Annotated[
        str | None,
        typer.Option(
            "--session",
            help="Run it as a turn of this session (default: none, whatever the run's was).",
            show_default=False,
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show tool calls, hooks and results.")
    ] = False,
    project: ProjectOption = None,
    state: StateOption = None,
) -> None:
    """Run a run's agent on its input again, on the project as it is now."""
    # deferred: `fim --help` imports every command module; this loads the run command
    from fim.commands.run import run
    from fim.config.serving import command_needs, need_settings

    store = open_store(ctx, project, state)
    with user_errors():
        record, text = _run(store, _input_of(store, run_id))
    need_settings(command_needs("run"))  # it calls models as `fim run` does
    print(f"run {record.id} again: {record.name} on its input", file=sys.stderr)
    run(ctx, agent=record.name, prompt=text, verbose=verbose, session=session, project=project)


def save_case(
    ctx: typer.Context,
    run_id: RunId,
    suite: Annotated[
        Path | None,
        typer.Option(
            "--suite",
            help="The suite file to add the case to (default: evals/<agent>.yaml).",
            show_default=False,
        ),
    ] = None,
    project: ProjectOption = None,
    state: StateOption = None,
) -> None:
    """Add a run to its agent's eval suite (evals/<agent>.yaml) as a case.

    The case has the run's input, a `tool_called` for each tool it called and a `contains`
    of its answer's first line; the command prints the case it added."""
    # deferred: loading fim.config costs hundreds of ms
    from fim.commands.runs_case import append_case, checked_suite, run_case
    from fim.config.loader import find_root, load
    from fim.store.run_inputs import run_events

    store = open_store(ctx, project, state)

    async def read() -> tuple[RunRecord, list[dict[str, Any]]]:
        record = await _record(store, run_id)
        return record, await run_events(store, record)

    with user_errors():
        record, events = _run(store, read())
        root = find_root(project_dir(ctx, project))
        decls = load(root)
        if record.kind != "agent":
            fail(f"run {record.id} is a workflow run: only an agent run is saved as a case")
        agents = {*decls.entries["agent"], *decls.broken["agent"]}
        if record.name not in agents:
            fail(
                f"run {record.id} is of agent '{record.name}', which is not one of this "
                f"project's agents ({', '.join(sorted(agents)) or 'none'})",
                "save it from the project whose agent made the run (--project DIR)",
            )
        folder = root / decls.folder("eval")
        path = suite if suite is not None else folder / f"{record.name}.yaml"
        shown = _shown(path)
        path = checked_suite(path, root, folder, shown)  # no link, not outside (attack-61 F3)
        case = run_case(record.id, events, record.data.get("output"))
        added = append_case(path, record.name, case, shown, record.id)
    typer.echo(f"added to {shown}:")
    typer.echo(added.rstrip("\n"))


async def _record(store: Store, typed: str) -> RunRecord:
    run_id = await resolve_run(store, typed)
    record = await store.get_run(run_id)
    if record is None:
        fail(f"no run '{typed}'", "`fim runs list` shows the runs")
    return record


async def _input_of(store: Store, typed: str) -> tuple[RunRecord, str]:
    """The agent run `typed` names and its recorded input."""
    # deferred: loading the event log costs a few ms
    from fim.store.run_inputs import masked_input, recorded_input

    record = await _record(store, typed)
    if record.kind != "agent":
        fail(f"run {record.id} is a workflow run: `fim workflow run {record.name}` starts one")
    text = await recorded_input(store, record)
    if text is None:
        fail(
            f"run {record.id} has no recorded input (it was refused before it started)",
            f'fim run {record.name} "your input"',
        )
    if masked_input(text):  # the mask, not the input, would be run (attack-61 F7)
        fail(
            f"run {record.id} had a secret masked in its stored input (it holds ***): "
            "it is not run again with the mask in place of the secret",
            f'send the input anew: fim run {record.name} "your input"',
        )
    return record, text


def _shown(path: Path) -> str:
    """`path` relative to the working directory when it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


__all__ = ["rerun", "save_case"]
