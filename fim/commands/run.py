"""`fim run AGENT [PROMPT]`: one request, or an interactive chat, streamed to the terminal."""

from __future__ import annotations

import logging
import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from fim import private
from fim.commands import (
    ProjectOption,
    fail,
    load_snapshot,
    run_async,
    run_view,
    user_errors,
)
from fim.commands.chat import chat as _chat
from fim.commands.completion import complete_agent
from fim.commands.run_turn import CliSession, run_turn
from fim.errors import RunError
from fim.stdout_guard import claim_stdout
from fim.terminal import printable


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def run(
    ctx: typer.Context,
    agent: Annotated[
        str | None,
        typer.Argument(
            help="Agent name (see `fim list agents`).",
            show_default=False,
            autocompletion=complete_agent,
        ),
    ] = None,
    prompt: Annotated[
        str | None,
        typer.Argument(
            help="The request ('-': read it from standard input). Omit it to chat interactively."
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show tool calls, hooks and results.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the event stream as JSON lines.")
    ] = False,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Model role or litellm string to use.")
    ] = None,
    no_stream: Annotated[
        bool, typer.Option("--no-stream", help="Wait for whole replies instead of tokens.")
    ] = False,
    auto: Annotated[
        bool, typer.Option("--auto", help="Let the model delegate to the project's agents.")
    ] = False,
    session: Annotated[
        str | None,
        typer.Option(
            "--session",
            help="Continue a session kept in the state store (the one `session_id` names over "
            "HTTP); its session budgets apply. A chat without it starts a new one.",
            show_default=False,
        ),
    ] = None,
    wait_approvals: Annotated[
        bool,
        typer.Option(
            "--wait-approvals",
            help="Without a terminal, wait for `fim approvals approve ID` when a `confirm` "
            "hook asks (default: deny such a call at once). At a terminal fim asks y/N.",
        ),
    ] = False,
    project: ProjectOption = None,
) -> None:
    """Run an agent on a prompt and stream its answer (`fim run --auto PROMPT` delegates).

    The run is recorded in the state store: `fim runs show RUN_ID` prints it afterwards."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.run.delegation import AUTO, resolve_agent

    if auto:
        agent, prompt = AUTO, prompt if prompt is not None else agent
    if agent is None:
        fail("missing agent name", "fim run AGENT [PROMPT], or fim run --auto PROMPT")
    if session is not None and not 0 < len(session) <= 200:
        fail("--session: a name of 1 to 200 characters is expected")
    claim_stdout()  # the answer is `EventPrinter`'s alone: any other stdout write is a print
    snapshot = load_snapshot(ctx, project)
    if snapshot.command_hooks:  # a read-only project's transcripts: where, said at start
        private.transcripts(snapshot.root)
    agent = snapshot.named("agent", agent)  # `fim run agents/x.yaml`: a path a shell completed
    with user_errors():
        known_agent(snapshot, agent)
        if model is not None:
            check_model(snapshot, model)
        resolve_agent(snapshot, agent)
        if agent in snapshot.agents:  # a missing key fails now, not after MCP servers start
            # deferred: loading fim.config.schema costs hundreds of ms
            from fim.run.preflight import check_agent

            check_agent(snapshot, snapshot.agents[agent], model)
            if model is None and not as_json and sys.stderr.isatty():
                _note_scripted(snapshot, agent)
    view = run_view.EventPrinter(verbose=verbose, as_json=as_json)
    view.approvals = run_view.Approvals(ask=run_view.interactive(), wait=wait_approvals)
    if not (sys.stdin.isatty() or sys.stderr.isatty()):
        # nobody watches this run: an MCP server's question is declined (fim/mcp/caller.py)
        os.environ.setdefault("FIM_ELICITATION", "decline")
    with _operator_lines(verbose and not as_json):
        if prompt is None and sys.stdin.isatty() and not as_json:
            code = run_async(
                _chat(snapshot, agent, model, view, stream=not no_stream, session=session),
                cancel_on_sigterm=True,
            )
        else:
            text = prompt if prompt not in (None, "-") else read_prompt()
            if not text.strip():
                fail(
                    "no prompt: the argument is empty and so is standard input",
                    f'fim run {agent} "your question", or pipe it: echo "..." | fim run {agent}',
                )
            code = run_async(
                _once(snapshot, agent, text, model, view, stream=not no_stream, session=session),
                cancel_on_sigterm=True,
            )
    raise typer.Exit(code)


@contextmanager
def _operator_lines(shown: bool) -> Iterator[None]:
    """While the run goes, with -v (`shown`), what fim logs at info for the person running
    the agent goes to stderr: the sandbox's facts about this host (no memory cgroup: the
    watchdog alone caps memory) and what a hook that allowed wrote on stderr (never an
    event: not the model's or an API caller's to read)."""
    if not shown:
        yield
        return
    loggers = [logging.getLogger(name) for name in ("fim.sandbox", "fim.hooks")]
    before = [logger.level for logger in loggers]
    handler = _ToStderr()
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        for logger, level in zip(loggers, before, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


class _ToStderr(logging.Handler):
    """One line per record on the stderr of the moment (a test's runner swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        sys.stderr.write(printable(f"fim: {record.getMessage()}") + "\n")


def _note_scripted(snapshot: Any, agent: str) -> None:
    """Say so when the agent's model is a script (the demo agents of `fim init`): someone
    at a terminal asking their own question would otherwise get the script's answer and
    take it for a model's."""
    used = snapshot.model_settings(snapshot.agents[agent].model).model
    if used.startswith("scripted:"):
        print(
            f"note: {agent} runs on a scripted model, which replays "
            f"{used.removeprefix('scripted:')} whatever the prompt; `model: general` in "
            "its file uses a language model",
            file=sys.stderr,
        )


def read_prompt() -> str:
    """The prompt piped in (`echo "..." | fim run AGENT`, `fim run AGENT -`), without the
    one newline that ends what `echo` or a file gives: the model reads the question, not
    `question\\n`."""
    text = sys.stdin.read()
    return text.removesuffix("\n").removesuffix("\r") if text.endswith("\n") else text


def known_agent(snapshot: Any, agent: str) -> None:
    """`fim run asistant`: an unknown agent, with validate's did-you-mean; `fim run "Tip on
    48?"` (a prompt where the agent goes: no agent name has a space) shows the usage with
    one of the project's agents."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.config.problems import suggest
    from fim.run.delegation import AUTO

    if agent == AUTO or agent in snapshot.agents:
        return
    hint = suggest(agent, snapshot.agents, "agents") or "no agents in agents/"
    if any(c.isspace() for c in agent.strip()):
        example = sorted(snapshot.agents)[0] if snapshot.agents else "AGENT"
        asked = shlex.quote(agent) if set(agent) & set('"$`\\!') else f'"{agent}"'
        hint = f'usage: fim run AGENT "PROMPT", e.g. fim run {example} {asked}'
    raise RunError(f"unknown agent '{agent}'", hint=hint)


def check_model(snapshot: Any, model: str) -> None:
    """`fim run -m MODEL`: a role of fim.yaml, or a litellm string whose provider exists,
    checked as `fim validate` checks them, before any model library loads."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.config.providers import provider_problem

    if model in snapshot.models or model.startswith("scripted:"):
        return
    if "/" in model:
        problem = provider_problem(model)
        if problem is not None:
            raise RunError(f"-m {problem[0]}", hint=problem[1])
        return
    # deferred: only for a model that is neither a role nor a provider string
    from fim.build.model_checks import unknown_role
    from fim.llm import catalog

    message, hint = unknown_role(model, snapshot.models, catalog.listed)
    raise RunError(f"-m: {message}", hint=hint)


async def _once(
    snapshot: Any,
    agent: str,
    prompt: str,
    model: str | None,
    view: run_view.EventPrinter,
    stream: bool,
    session: str | None = None,
) -> int:
    if session is None:
        code, _ = await run_turn(snapshot, agent, prompt, model, view, stream)
        return code
    # deferred: loading pydantic_core costs tens of ms
    from fim.types import Message

    kept = CliSession(snapshot, session)
    try:
        with user_errors():
            history = [*(await kept.history()), Message(role="user", content=prompt)]
        code, output = await run_turn(snapshot, agent, history, model, view, stream, kept)
        if code == 0:
            await kept.save([*history, Message(role="assistant", content=output)])
        return code
    finally:
        await kept.services.aclose()
