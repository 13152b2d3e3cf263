"""`fim run AGENT [PROMPT]`: one request, or an interactive chat, streamed to the terminal."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fim.capabilities import CAPABILITIES
from fim.commands import (
    ProjectOption,
    fail,
    load_snapshot,
    run_async,
    run_view,
    user_errors,
)
from fim.errors import RunError
from fim.terminal import printable

if TYPE_CHECKING:
    from fim.types import Message


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def run(
    ctx: typer.Context,
    agent: Annotated[
        str | None, typer.Argument(help="Agent name (see `fim list agents`).", show_default=False)
    ] = None,
    prompt: Annotated[
        str | None, typer.Argument(help="The request. Omit it to chat interactively.")
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
            "HTTP); its session budgets apply.",
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
    snapshot = load_snapshot(ctx, project)
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
            text = prompt if prompt is not None else sys.stdin.read()
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


async def _run(
    snapshot: Any,
    agent: str,
    conversation: str | list[Message],
    model: str | None,
    view: run_view.EventPrinter,
    stream: bool,
    session: CliSession | None = None,
) -> tuple[int, str]:
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.events import Notice, RunFinished
    from fim.llm import make_model
    from fim.run.agent import run_agent
    from fim.run.services import Services

    status, output = "error", ""
    services = (
        session.services
        if session
        else Services(root=snapshot.root, state_url=snapshot.project.state, providers=CAPABILITIES)
    )
    record = run_view.RunRecorder(agent)
    record.open(services)
    quiet = run_view.ApprovalLogFilter()
    hooks_log = logging.getLogger("fim.hooks")
    hooks_log.addFilter(quiet)  # this command prints each approval request itself, once
    try:
        with user_errors():
            override = make_model(snapshot.model_settings(model), snapshot.root) if model else None
            async for event in run_agent(
                snapshot,
                agent,
                conversation,
                model=override,
                stream=stream,
                services=services,
                session=session.name if session else None,
            ):
                record.add(event)
                answered = isinstance(event, Notice) and await view.approvals.answer(
                    event, services
                )
                if not answered or view.as_json:
                    view.show(event)
                if isinstance(event, RunFinished):
                    status, output = event.status, event.output
        await record.save(services, status, output)
    finally:
        hooks_log.removeFilter(quiet)
        if session is None:
            await services.aclose()
    return (0 if status == "ok" else 1), output


def known_agent(snapshot: Any, agent: str) -> None:
    """`fim run asistant`: an unknown agent, with validate's did-you-mean."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.config.problems import suggest
    from fim.run.delegation import AUTO

    if agent == AUTO or agent in snapshot.agents:
        return
    raise RunError(
        f"unknown agent '{agent}'",
        hint=suggest(agent, snapshot.agents, "agents") or "no agents in agents/",
    )


def check_model(snapshot: Any, model: str) -> None:
    """`fim run -m MODEL`: a role of fim.yaml, or a litellm string whose provider exists,
    checked as `fim validate` checks them, before any model library loads."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.config.problems import suggest
    from fim.config.providers import provider_problem

    if model in snapshot.models or model.startswith("scripted:"):
        return
    if "/" in model:
        problem = provider_problem(model)
        if problem is not None:
            raise RunError(f"-m {problem[0]}", hint=problem[1])
        return
    roles = ", ".join(snapshot.models) or "none"
    close = suggest(model, snapshot.models, "roles")
    if close and close.startswith("did you mean"):
        hint = close
    elif model.startswith(("gpt-", "o1", "o3", "o4", "chatgpt-")):
        hint = f"a model string names its provider: -m openai/{model} (roles: {roles})"
    else:
        hint = f"a role of fim.yaml (roles: {roles}) or provider/name, e.g. openai/gpt-4o-mini"
    raise RunError(f"-m: unknown model role '{model}'", hint=hint)


class CliSession:
    """`fim run --session NAME`: the conversation kept in the state store under NAME, the
    same rows `session_id` reads over HTTP (owner "", as on a server without API keys), so
    its session budgets count every surface's runs of it."""

    def __init__(self, snapshot: Any, name: str) -> None:
        # deferred: loading fim.config.schema costs hundreds of ms
        from fim.run.services import Services

        self.name = name
        self.services = Services(
            root=snapshot.root, state_url=snapshot.project.state, providers=CAPABILITIES
        )

    def _sessions(self) -> Any:
        # deferred: loading fim.masking costs hundreds of ms
        from fim.store import get_store
        from fim.store.sessions import Sessions

        return Sessions(get_store(self.services))

    async def history(self) -> list[Message]:
        found = await self._sessions().load(self.name)
        if found is None:
            return []
        owner, history = found
        if owner:
            raise RunError(
                f"session '{self.name}' belongs to an API key of the server",
                hint="continue it over HTTP with that key, or pick another --session",
            )
        return list(history)

    async def save(self, history: list[Message]) -> None:
        await self._sessions().save(self.name, "", history, name=self.name)


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
        code, _ = await _run(snapshot, agent, prompt, model, view, stream)
        return code
    # deferred: loading pydantic_core costs tens of ms
    from fim.types import Message

    kept = CliSession(snapshot, session)
    try:
        with user_errors():
            history = [*(await kept.history()), Message(role="user", content=prompt)]
        code, output = await _run(snapshot, agent, history, model, view, stream, kept)
        if code == 0:
            await kept.save([*history, Message(role="assistant", content=output)])
        return code
    finally:
        await kept.services.aclose()


CHAT_HELP = """\
Type a message and press Enter; the whole conversation is sent each turn.
  /help    this help
  /reset   forget the conversation so far
  /exit    leave (also /quit, Ctrl-D)"""


async def _chat(
    snapshot: Any,
    agent: str,
    model: str | None,
    view: run_view.EventPrinter,
    stream: bool,
    session: str | None = None,
) -> int:
    """A multi-turn chat: the conversation so far is resent on every turn."""
    kept = CliSession(snapshot, session) if session is not None else None
    try:
        return await _chat_turns(snapshot, agent, model, view, stream, kept)
    finally:
        if kept is not None:
            await kept.services.aclose()


async def _chat_turns(
    snapshot: Any,
    agent: str,
    model: str | None,
    view: run_view.EventPrinter,
    stream: bool,
    kept: CliSession | None,
) -> int:
    # deferred: loading asyncio costs a few ms

    # deferred: loading pydantic_core costs tens of ms
    from fim.types import Message

    history: list[Message] = []
    if kept is not None:
        with user_errors():
            history = await kept.history()
    print(f"Chatting with {agent}. /help for commands, Ctrl-D or /exit to leave.", file=sys.stderr)
    while True:
        try:
            line = await asyncio.to_thread(input, "you> ")
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            return 0
        command = line.strip()
        if command in {"/exit", "/quit"}:
            return 0
        if command in {"/help", "/?"}:
            print(CHAT_HELP, file=sys.stderr)
            continue
        if command == "/reset":
            history.clear()
            print("(conversation cleared)", file=sys.stderr)
            continue
        if command.startswith("/") and " " not in command:
            print(f"unknown command {command} (/help lists them)", file=sys.stderr)
            continue
        if not command:
            continue
        history.append(Message(role="user", content=line))
        code, output = await _run(snapshot, agent, list(history), model, view, stream, kept)
        history.append(Message(role="assistant", content=output))
        if kept is not None and code == 0:
            await kept.save(history)
