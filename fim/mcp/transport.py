"""Opening one MCP client connection: stdio, streamable HTTP or legacy SSE.

The SDK's transports are async context managers; `open_client` enters them (and the
`Client` on top) on an `AsyncExitStack` owned by the caller, which must be the task that
later exits it: anyio cancel scopes refuse to be exited from another task.

The read stream is wrapped so the owner learns the moment the connection ends (a stdio
server that died, an HTTP stream that closed) instead of finding out on the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import importlib
import logging
import os
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import anyio

from fim.config.child_env import NETWORK_FAILURE, network_env, network_hint, withheld_note
from fim.config.header_text import mapping_problems
from fim.config.schema import HttpServer, McpServer, StdioServer
from fim.masking import known
from fim.mcp.pacing import ReadBudget

if TYPE_CHECKING:
    from mcp.client.session import ElicitationFnT, MessageHandlerFnT, SamplingFnT

PASSED_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "VIRTUAL_ENV", "PYENV_ROOT", "PYENV_VERSION")
"""Inherited on top of the SDK's minimal set (HOME, LOGNAME, PATH, SHELL, TERM, USER), so
interpreters find their locale and environment without leaking the rest of ours; with the
CA bundle and proxy variables hooks get too (`fim.config.child_env.network_env`: a proxy
URL only without credentials), so `uvx` / `npx` download where the network needs them."""

log = logging.getLogger(__name__)

STDERR_TAIL = 600
STDERR_MAX = 1024 * 1024
STDERR_KEEP = 64 * 1024
STDERR_TRIM_SECONDS = 5.0
"""How often a running stdio server's captured stderr is trimmed (`StderrLog.trim`)."""


class StderrLog:
    """A stdio server's stderr, captured in an unlinked temp file.

    A real file (not a pipe) because the child writes to it directly: a pipe nobody reads
    would fill up and block a chatty server. Its descriptor is set to `O_APPEND` (the
    mode "a" of a temporary file only seeks to the end once), since the child shares it:
    every write of either goes to the end, also after `trim`.
    """

    def __init__(self) -> None:
        self.file: IO[bytes] = tempfile.TemporaryFile(mode="a+b")  # noqa: SIM115 - closed by close()
        fd = self.file.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)

    def tail(self, limit: int = STDERR_TAIL) -> str:
        """The last non-blank lines of stderr, squeezed onto one line for messages. Masked
        as read, before anything reshapes it: squeezed and joined with ` | ` first, a PEM
        key, base64 wrapped over lines or a secret holding a tab is no form the masker
        knows. Then cut (`Masker.tail`: a server may print its token, and the cut must not
        leave the part no mask matches), the start of a read from the middle of the file
        being a cut too."""
        fd = self.file.fileno()
        size = os.fstat(fd).st_size
        start = max(0, size - limit * 4)
        raw = os.pread(fd, size - start, start).decode("utf-8", "replace")
        masker = known()
        raw = masker.text(raw)
        if start:
            raw = masker.edge(raw, at="start")
        lines = [" ".join(line.split()) for line in raw.splitlines()]
        text = " | ".join(line for line in lines if line)
        shown, cut = masker.tail(text, limit)
        return "..." + shown if cut else shown

    def trim(self) -> None:
        """Keep the file short: past `STDERR_MAX` bytes only the last `STDERR_KEEP` stay
        (the child writes for as long as it runs; a chatty or hostile server would fill the
        disk). The child appends (`O_APPEND`), so it goes on at the new end."""
        fd = self.file.fileno()
        size = os.fstat(fd).st_size
        if size <= STDERR_MAX:
            return
        tail = os.pread(fd, STDERR_KEEP, size - STDERR_KEEP)
        # what the child wrote while this read, read too, right before the truncation: the
        # lines it loses are only those written between the last two calls (the newest
        # lines, a crash's message, were lost whenever the trimmer waited for a core)
        for _ in range(4):  # a server writing without pause is not followed for ever
            end = os.fstat(fd).st_size
            if end <= size:
                break
            start = max(size, end - STDERR_KEEP)
            chunk = os.pread(fd, end - start, start)
            tail = (tail + chunk)[-STDERR_KEEP:] if start == size else chunk
            size = end
        os.ftruncate(fd, 0)
        os.write(fd, tail)

    def close(self) -> None:
        self.file.close()


class _WatchedReadStream:
    """Forwards a transport's read stream and reports when it ends."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _WatchedReadStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._inner.aclose()

    def __getattr__(self, name: str) -> Any:
        # e.g. `last_context`, which the dispatcher reads duck-typed from HTTP streams
        return getattr(self._inner, name)


@asynccontextmanager
async def _watched(transport: Any, on_end: Callable[[], None]) -> AsyncIterator[tuple[Any, Any]]:
    async with transport as (read, write):
        yield _WatchedReadStream(read, on_end), write


_SDK_MODULES = ("mcp", "mcp.client.stdio", "mcp_types")


def _import_now() -> None:

    for name in _SDK_MODULES:
        importlib.import_module(name)


async def import_sdk() -> None:
    """Load the SDK modules a connection needs without blocking the event loop.

    Importing `mcp` takes about half a second, during which a run has its first model
    call to make. It happens on a daemon thread, not the default executor: a run that
    ended without using the server (the model answered at once) exits without waiting
    for an import nobody needs any more.
    """

    if all(name in sys.modules for name in _SDK_MODULES):
        return
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if done.done():
            return
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)

    def work() -> None:
        error: BaseException | None = None
        try:
            _import_now()
        except BaseException as exc:  # handed to the awaiting task
            error = exc
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=work, name="fim-mcp-import", daemon=True).start()
    await asyncio.shield(done)


def stdio_params(decl: StdioServer, root: Path) -> Any:
    """SDK parameters for a stdio server: env merged onto a minimal inherited set, cwd
    relative to the project root (the root itself by default)."""
    # deferred: loading mcp_types costs hundreds of ms
    from mcp.client.stdio import StdioServerParameters

    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    env.update(network_env(os.environ)[0])
    env.update(decl.env)
    cwd = (root / decl.cwd) if decl.cwd else root
    # a byte that is not UTF-8 killed the SDK's strict reader: every later call waited out
    # its timeout (attack-55 F2); replaced, it is one odd character in a message
    return StdioServerParameters(
        command=decl.command,
        args=list(decl.args),
        env=env,
        cwd=cwd,
        encoding_error_handler="replace",
    )


def network_note(name: str, decl: StdioServer, stderr: str) -> str:
    """What a stdio server's start failure adds when its stderr reads like a certificate or
    proxy failure (`uvx`'s `invalid peer certificate: UnknownIssuer`): the variables fim
    passes and how to pass more, and in fim's log the proxy variables it withheld
    (credentials in their URL; `fim.config.child_env`)."""
    if not NETWORK_FAILURE.search(stderr):
        return ""
    how = '`env: {NAME: "${NAME}"}` on the server'
    withheld = [n for n in network_env(os.environ)[1] if n not in decl.env]
    if withheld:
        how_named = f'`env: {{{withheld[0]}: "${{{withheld[0]}}}"}}` on the server'
        log.warning(withheld_note(f"MCP server '{name}'", withheld, how_named))
    return f" ({network_hint(how)})"


async def open_client(
    stack: AsyncExitStack,
    decl: McpServer,
    root: Path,
    *,
    stderr: StderrLog | None,
    on_message: MessageHandlerFnT,
    on_end: Callable[[], None],
    on_cut: Callable[[str], None] | None = None,
    budget: ReadBudget | None = None,
    sampling: SamplingFnT | None = None,
    elicitation: ElicitationFnT | None = None,
) -> Any:
    """Connect to the server and complete the handshake; returns an entered `mcp.Client`.

    `mode="legacy"` (the initialize handshake) is what every published server speaks
    today, and it is the era in which `notifications/tools/list_changed` reaches the
    client on the session itself. What the server sends is read at the pace of `budget`
    (`fim.mcp.pacing`).
    """
    # deferred: loading mcp_types costs hundreds of ms
    from mcp import Client

    if isinstance(decl, StdioServer):
        # deferred: loading mcp_types costs hundreds of ms
        from mcp.client.stdio import stdio_client

        # deferred: loaded with a server's client only
        from fim.mcp.capped import cap_stdio, stdio_budget, stdio_cut
        from fim.mcp.groups import group_ended

        if not (root / (decl.cwd or ".")).is_dir():
            raise FileNotFoundError(f"working directory '{decl.cwd}' does not exist")
        assert stderr is not None
        cap_stdio()
        stdio_cut.set(on_cut)  # this task's: the session's owner, which opens the server
        stdio_budget.set(budget)
        transport: Any = group_ended(
            stdio_client(stdio_params(decl, root), errlog=stderr.file)  # type: ignore[arg-type]
        )
    elif isinstance(decl, HttpServer) and decl.transport == "sse":
        refuse_headers(decl)
        # deferred: loading mcp_types costs hundreds of ms
        from mcp.client.sse import sse_client

        transport = sse_client(
            decl.url,
            headers=dict(decl.headers),
            timeout=decl.timeout,
            httpx_client_factory=functools.partial(_client, on_cut=on_cut, budget=budget),
        )
    else:
        # deferred: loading mcp_types costs hundreds of ms
        from mcp.client.streamable_http import streamable_http_client

        # deferred: loaded with an HTTP server's client only
        from fim.mcp import capped

        refuse_headers(decl)
        http = await stack.enter_async_context(
            _client(headers=dict(decl.headers), on_cut=on_cut, budget=budget)
        )
        # the SDK's own cap on an event (1 MiB) failed a 2 MB screenshot as a lost server
        transport = streamable_http_client(
            decl.url, http_client=http, max_sse_event_size=2 * capped.MAX_ANSWER_BYTES
        )
    client = Client(
        _watched(transport, on_end),
        mode="legacy",
        message_handler=on_message,
        cache=None,
        client_info=_client_info(),
        list_roots_callback=_roots(root),
        sampling_callback=sampling,
        elicitation_callback=elicitation,
    )
    return await stack.enter_async_context(client)


class HeaderConfigError(ValueError):
    """An MCP server's declared header no request can carry: a configuration error, said
    before anything is sent, naming the header and never its value."""


def refuse_headers(decl: HttpServer) -> None:
    """Raise `HeaderConfigError` for the first of `decl.headers` no request can carry
    (`fim.config.header_text`, the rule `fim validate` applies). httpx's own error was
    Python's `UnicodeEncodeError`, naming the character of the value and its position:
    one character of a credential, in the model's observation (attack-60 F2)."""
    for name, why in mapping_problems(decl.headers):
        raise HeaderConfigError(
            f"configuration error: header {name!r} (the server's `headers:`): {why}; fim "
            "sent nothing (fix it in fim.yaml, or the variable it reads; `fim validate` "
            "shows where)"
        )


def _client(
    headers: Any = None,
    timeout: Any = None,
    auth: Any = None,
    *,
    on_cut: Callable[[str], None] | None = None,
    budget: ReadBudget | None = None,
) -> Any:
    """The SDK's HTTP client for an MCP server (its timeouts), passing the run's trace
    context on and reading at most `fim.mcp.capped.MAX_ANSWER_BYTES` of one answer
    (`on_cut` is told why when it stops reading one), at the pace of `budget`."""
    # deferred: loading mcp_types costs hundreds of ms
    from mcp.shared._httpx_utils import create_mcp_http_client

    # deferred: loaded with an HTTP server's client only
    from fim.mcp.capped import capped

    # deferred: loading fim.observe.http costs a few ms
    from fim.observe.http import traced

    client = create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)
    return traced(capped(client, on_cut=on_cut, budget=budget))


def _roots(root: Path) -> Any:
    """Declare the `roots` capability with one root: the project directory, so a
    filesystem-style server knows where it may work."""
    # deferred: loading mcp_types costs hundreds of ms
    import mcp_types
    from pydantic import FileUrl

    async def list_roots(_context: Any) -> Any:
        uri = FileUrl(root.resolve().as_uri())
        return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri=uri, name="project")])

    return list_roots


def _client_info() -> Any:
    # deferred: loading mcp_types costs hundreds of ms
    import mcp_types

    return mcp_types.Implementation(name="fim", version=_version())


def _version() -> str:
    try:
        return version("fim")
    except PackageNotFoundError:
        return "0"
