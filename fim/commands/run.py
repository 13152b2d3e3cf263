"""`fim run AGENT [PROMPT]`: one request, or an interactive chat, streamed to the terminal."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fim.capabilities import CAPABILITIES
from fim.commands import (
    ProjectOption,
    err,
    fail,
    load_snapshot,
    printable,
    run_async,
    user_errors,
)
from fim.errors import RunError

if TYPE_CHECKING:
    from fim.events import Event, Token
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
    view = EventPrinter(verbose=verbose, as_json=as_json)
    view.approvals = Approvals(ask=interactive(), wait=wait_approvals)
    if not (sys.stdin.isatty() or sys.stderr.isatty()):
        # nobody watches this run: an MCP server's question is declined (fim/mcp/caller.py)
        os.environ.setdefault("FIM_ELICITATION", "decline")
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
    view: EventPrinter,
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
    record = RunRecorder(agent)
    record.open(services)
    quiet = _ApprovalLogFilter()
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


class _ApprovalLogFilter(logging.Filter):
    """Drops the hooks' log line of a new approval request while `fim run` shows it (the
    same text as the run's notice: it was printed twice)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith("approval "))


def interactive() -> bool:
    """Someone at a terminal can answer a question: stdin and stderr are both a TTY."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def read_answer(prompt: str) -> str:
    """One line typed at the terminal (a test replaces it)."""
    sys.stderr.write(prompt)
    sys.stderr.flush()
    return sys.stdin.readline()


NO_TERMINAL = "fim run (no terminal)"
"""Who denied a call that nobody could be asked about, as the approval records it."""


class Approvals:
    """How `fim run` answers a `confirm` hook's request (a pending approval in the state
    store, announced by a notice while the hook waits on it).

    - At a terminal (`ask`): `Allow <tool> <args>? [y/N]`, typed right here.
    - Without one and without `--wait-approvals`: denied at once (fail closed, as MCP
      elicitation is declined): nobody would see the request before it expires, and the run
      would hang for the hook's whole timeout.
    - With `--wait-approvals`: the request is printed once and the hook waits for
      `fim approvals approve|deny ID` from another shell.

    A decision is recorded the way `fim approvals approve|deny` records it
    (`Store.resolve_approval`, by `cli:<user>`), so the hook that waits, the audit trail and
    `fim approvals list --all` see the same thing whichever way it was decided."""

    def __init__(self, *, ask: bool = False, wait: bool = False) -> None:
        self.ask = ask
        self.wait = wait

    async def answer(self, notice: Any, services: Any) -> bool:
        """Decide (or announce) the tool approval `notice` names; False for any other
        notice, which the printer shows as before."""
        approval_id = notice.data.get("approval_id")
        if not approval_id or "elicitation" in notice.data or "tool_name" not in notice.data:
            return False
        # deferred: loading the state store costs tens of ms
        from fim.commands.approvals import cli_user
        from fim.hooks.approval import preview
        from fim.store import get_store

        store = get_store(services)
        pending = await store.get_approval(approval_id)
        if pending is None or pending.kind != "tool" or pending.status != "pending":
            return False
        if self.wait:
            err(notice.message)
            return True
        if self.ask:
            # deferred: loading asyncio costs a few ms (the run loaded it long ago)
            import asyncio

            args = preview(json.dumps(pending.args, ensure_ascii=False, default=str), 300)
            # on a line of its own, after whatever the answer so far left on the last one;
            # the model's words cannot be escape sequences any more (`printable`)
            question = f"\nAllow {printable(pending.tool_name)} {printable(args)}? [y/N] "
            reply = await asyncio.to_thread(read_answer, question)
            approved = reply.strip().lower() in ("y", "yes")
            note = None if approved else "denied at the terminal"
            await store.resolve_approval(
                approval_id, approved, by=cli_user(), data={"note": note} if note else None
            )
            return True
        await store.resolve_approval(
            approval_id,
            False,
            by=NO_TERMINAL,
            data={"note": "nobody could be asked: fim run had no terminal"},
        )
        err(
            f"denied {pending.tool_name} (approval {approval_id}): a `confirm` hook asks a "
            "human and this run has no terminal (rerun with --wait-approvals to wait for "
            f"`fim approvals approve ID`)"
        )
        return True


class RunRecorder:
    """Keeps a `fim run` run in the state store, as `fim serve` keeps the runs it serves
    (record `agent` with the status, output and non-token events), so `fim runs list` and
    `fim runs show RUN_ID` find it. A failed write is a warning: it never fails the run."""

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.run_id = ""
        self.events: list[dict[str, Any]] = []
        self._opening: asyncio.Future[None] | None = None

    def open(self, services: Any) -> None:
        """Start setting up the state store in a thread while the run goes on (~0.1-0.2 s,
        hidden behind the model's answer), so recording adds next to nothing at the end."""
        # deferred: loading the state store costs tens of ms
        from fim.store import get_store

        self._opening = asyncio.ensure_future(asyncio.to_thread(get_store(services).open))

    def add(self, event: Any) -> None:
        if not self.run_id:
            self.run_id = event.run_id
        if event.type != "token" and event.run_id == self.run_id:
            self.events.append(event.model_dump(mode="json"))

    async def save(self, services: Any, status: str, output: str) -> None:
        if not self.run_id:
            return
        # deferred: loading the state store costs tens of ms
        from fim.store import get_store

        data = {"output": output, "events": self.events, "surface": "cli"}
        try:
            if self._opening is not None:
                await self._opening
            await get_store(services).put_run(self.run_id, "agent", self.agent, status, data)
        except Exception as exc:  # recording is a convenience; the answer was given
            err(f"warning: run {self.run_id} was not recorded in the state store: {exc}")


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
    view: EventPrinter,
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
    view: EventPrinter,
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
    view: EventPrinter,
    stream: bool,
    kept: CliSession | None,
) -> int:
    # deferred: loading asyncio costs a few ms
    import asyncio

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


class EventPrinter:
    """Renders events for a terminal: the answer on stdout, the trace on stderr."""

    def __init__(self, *, verbose: bool = False, as_json: bool = False) -> None:
        self.verbose = verbose
        self.as_json = as_json
        self.approvals = Approvals()
        """What answers a `confirm` hook's request (`fim run` sets it from the terminal)."""
        self._streamed = False
        # deferred: loading rich costs a few ms
        from rich.console import Console

        # deferred: loading fim.masking costs a few ms
        from fim.masking import StreamMasker, known

        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        self._tokens = StreamMasker(known())
        self._last_token: Token | None = None
        """Tokens are masked as a stream: a secret split over two tokens is still caught."""

    def show(self, event: Event) -> None:
        # deferred: loading fim.masking costs a few ms (fim.events is loaded by now)
        from fim.events import (
            ErrorEvent,
            HookEvent,
            MessageEvent,
            Notice,
            RunFinished,
            Token,
            ToolCallEvent,
            ToolProgress,
            ToolResultEvent,
        )
        from fim.masking import mask_model

        event = mask_model(event)
        if self.as_json:
            if isinstance(event, Token):
                event = event.model_copy(update={"text": self._tokens.feed(event.text)})
                self._last_token = event
                if not event.text:
                    return
            elif (held := self._tokens.flush()) and self._last_token is not None:
                held_token = self._last_token.model_copy(update={"text": held})
                sys.stdout.write(held_token.model_dump_json() + "\n")
            sys.stdout.write(event.model_dump_json() + "\n")
            sys.stdout.flush()
            return
        match event:
            case Token():
                sys.stdout.write(printable(self._tokens.feed(event.text)))
                sys.stdout.flush()
                self._streamed = True
            case MessageEvent():
                text = self._tokens.flush() if self._streamed else event.content
                sys.stdout.write(printable(text) + "\n")
                sys.stdout.flush()
                self._streamed = False
            case ErrorEvent():
                self.err.print(f"[red]error:[/red] {_escape(event.message)}")
            case ToolCallEvent() if self.verbose:
                self._end_stream()
                args = json.dumps(event.arguments, ensure_ascii=False)
                self.err.print(f"[cyan]→ {event.name}[/cyan] {_escape(_clip(args, 300))}")
            case ToolResultEvent() if self.verbose:
                style = "red" if event.is_error else "green"
                self.err.print(
                    f"[{style}]← {event.name}[/{style}] [dim]({event.duration_ms:.0f} ms)[/dim] "
                    f"{_escape(_clip(event.content, 500))}"
                )
            case HookEvent() if self.verbose:
                reason = f": {_escape(event.reason)}" if event.reason else ""
                self.err.print(
                    f"[magenta]⚑ {event.point} {event.hook} {event.decision}[/magenta]{reason}"
                )
            case ToolProgress():
                total = f"/{event.total:g}" if event.total is not None else ""
                text = f" {_escape(_clip(event.message, 200))}" if event.message else ""
                self.err.print(f"[dim]… {event.name} {event.progress:g}{total}{text}[/dim]")
            case Notice() if self.verbose or "elicitation" in event.data:
                self.err.print(f"[yellow]• {_escape(event.message)}[/yellow]")
            case RunFinished() if self.verbose:
                usage = event.usage
                self.err.print(
                    f"[dim]{event.status} · {event.iterations} model calls · "
                    f"{usage.prompt_tokens}+{usage.completion_tokens} tokens · "
                    f"{event.duration_ms:.0f} ms[/dim]"
                )

    def _end_stream(self) -> None:
        if self._streamed:
            sys.stdout.write(printable(self._tokens.flush()) + "\n")
            self._streamed = False


def _clip(text: str, limit: int) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _escape(text: str) -> str:
    # deferred: loading rich costs a few ms
    from rich.markup import escape

    return escape(printable(text))
