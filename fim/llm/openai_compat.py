"""The fast path: OpenAI-compatible chat.completions over a pooled aiohttp session.

OpenAI itself, vLLM, llama.cpp, LM Studio, Ollama's /v1 and most gateways speak this wire
format, so fim talks to them directly instead of paying litellm's ~3 s import. It also
skips the `openai` SDK: against a zero-latency local server the SDK measured ~0.7 ms more
per call than plain HTTP and ~0.6 s more to import, and neither buys anything here —
retries, errors and SSE parsing are a few lines we need to own anyway for uniform errors.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fim.config.schema import ModelSettings
from fim.errors import RunError
from fim.llm import catalog
from fim.llm.backend import Backend
from fim.llm.base import (
    MAX_ERROR_DETAIL,
    OPENAI_BASE,
    UNREACHABLE,
    Transient,
    api_base,
    cannot_connect,
    chat_request,
    check_allowed,
    connect_failure,
    connection_refused,
    provider_of,
    quoted,
    request_options,
    resolve_key,
    status_error,
    timeout_error,
    with_retries,
)
from fim.llm.endpoint_secrets import check_no_userinfo, environment_base, remember_url
from fim.llm.reply_body import MAX_ERROR_BODY, error_detail, read_body, reply_bytes
from fim.llm.reply_body import sse_data as _sse_data
from fim.llm.wire import ReplyTooLarge, StreamAssembler, check_reply, loads, parse_response
from fim.llm.wire_request import encode_chat_request
from fim.retries import parse_retry_after
from fim.tls import client_context
from fim.types import Message, Model, ModelResponse, TextDelta, ToolSpec

if TYPE_CHECKING:
    import aiohttp

_SESSIONS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = (
    weakref.WeakKeyDictionary()
)
"""One pooled aiohttp session per event loop (a pool cannot cross loops).

aiohttp, not httpx: against a local endpoint an aiohttp request costs ~0.1-0.2 ms of CPU
and an httpx one ~0.7-0.95 ms, and httpcore's pool re-matches every queued request against
every connection, so its cost grew with the calls in flight (60% of an eval's CPU at 32)."""


_LAST: list[Any] = [None, None]
"""The loop and session `_session` returned last. Holds the loop strongly: it is replaced
by the next loop's first call, and `aclose_clients` clears it."""


def _session() -> aiohttp.ClientSession:
    # deferred: loading aiohttp costs hundreds of ms
    import aiohttp

    loop = asyncio.get_running_loop()
    last_loop, session = _LAST
    if last_loop is loop and session is not None and not session.closed:
        return session  # the loop of the previous call: no weak-dictionary lookup
    session = _SESSIONS.get(loop)
    if session is None or session.closed:
        connector = aiohttp.TCPConnector(limit=1000, limit_per_host=0, ssl=client_context())
        session = aiohttp.ClientSession(connector=connector, auto_decompress=True)
        _SESSIONS[loop] = session
        _close_with_loop(loop, session)
    _LAST[:] = [loop, session]
    return session


_GUARDS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


def _close_with_loop(loop: asyncio.AbstractEventLoop, session: aiohttp.ClientSession) -> None:
    """Close `session` when its loop shuts down, even if nobody calls `aclose_clients()`.

    asyncio offers no loop-shutdown callback, but `asyncio.run` (and every Runner) finalises
    suspended async generators before closing the loop; a generator parked at `yield` whose
    `finally` closes the session is that callback. Without it, a session left open by a
    library caller is reported as "Unclosed client session" at interpreter exit.
    """

    async def guard() -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            if not session.closed:
                await session.close()

    parked = guard()
    _GUARDS[loop] = parked  # a strong reference: collecting it would close the session now
    loop.create_task(parked.__anext__())


async def aclose_clients() -> None:
    """Close the pooled session of the running loop (run_agent, eval and serve call this
    when their loop is done with models)."""
    loop = asyncio.get_running_loop()
    if _LAST[0] is loop:
        _LAST[:] = [None, None]
    session = _SESSIONS.pop(loop, None)
    if session is not None:
        await session.close()


MAX_QUOTED_BODY = 120
"""The most of a body that is not JSON an error quotes."""

_RESERVED_BODY = frozenset({"model", "messages", "tools"})
"""Request parts an option (`extra`, a per-call option) could replace."""


def wire_model_name(model: str) -> str:
    return model.split("/", 1)[1] if model.startswith("openai/") else model


class OpenAICompatModel:
    """A model served by an OpenAI-compatible `/chat/completions` endpoint."""

    def __init__(self, settings: ModelSettings) -> None:
        self.settings = settings
        self.name = settings.model
        self.base_url = (api_base(settings) or environment_base() or OPENAI_BASE).rstrip("/")
        remember_url(self.base_url)  # a local provider's variable (OLLAMA_API_BASE) too
        self._url = self.base_url + "/chat/completions"
        self._wire_name = wire_model_name(settings.model)
        self._client_timeout: Any = None
        self._key: str | None = None

    def _prepare(self) -> dict[str, str]:
        """Resolve the key (it may come from the environment) and pass the request guard,
        before any byte is sent."""
        self._key = self._api_key()
        check_allowed(self.base_url, self.name)
        if self._key:  # aiohttp raised ValueError for both: every served run was a 500
            check_no_userinfo(self.name, self.base_url)
        headers = {"content-type": "application/json", "accept": "application/json"}
        if self._key:
            headers["authorization"] = f"Bearer {self._key}"
        return headers

    def _api_key(self) -> str | None:
        """The key the request sends: the model's own, else `OPENAI_API_KEY` (required at
        OpenAI itself)."""
        return resolve_key(self.settings, "openai", required=self.base_url == OPENAI_BASE)

    def _content(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        options: dict[str, Any],
        stream: bool = False,
    ) -> bytes:
        """The request body: `chat_request` as JSON bytes, each earlier message's and the
        tool list's text reused (`fim.llm.wire_request.encode_chat_request`)."""
        opts = request_options(self.settings, options)
        if stream:
            opts["stream"] = True
            opts.setdefault("stream_options", {"include_usage": True})
        if not _RESERVED_BODY.isdisjoint(opts):  # an option replacing a part: the plain way
            body = chat_request(self._wire_name, messages, tools, self.settings, options)
            if stream:
                body["stream"] = True
                body.setdefault("stream_options", {"include_usage": True})
            return json.dumps(body).encode()
        return encode_chat_request(self._wire_name, messages, tools, opts)

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> ModelResponse:
        headers = self._prepare()
        content = self._content(messages, tools, options)
        session = _session()

        async def attempt() -> Any:
            # deferred: loading aiohttp costs hundreds of ms
            import aiohttp

            try:
                async with session.post(
                    self._url, data=content, headers=headers, timeout=self._timeout()
                ) as response:
                    failed = response.status >= 400
                    limit = MAX_ERROR_BODY if failed else reply_bytes()
                    raw, whole = await read_body(response, limit)
                    if not whole:
                        response.close()  # the rest is unread: not back to the pool
                    if failed:
                        raise self._http_error(response.status, raw, response.headers)
                    if not whole:
                        raise ReplyTooLarge(self.name, self.base_url)
                    return self._json(raw)
            except TimeoutError:
                raise timeout_error(self.settings, self.base_url) from None
            except aiohttp.ClientError as exc:
                raise self._unreachable(exc) from None

        data = await with_retries(self.settings, attempt, self._key)
        reply = check_reply(parse_response(data, self.name), self.name, self.base_url)
        return await self._with_cost(reply)

    async def stream(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> AsyncIterator[TextDelta | ModelResponse]:
        # deferred: loading aiohttp costs hundreds of ms
        import aiohttp

        headers = self._prepare()
        content = self._content(messages, tools, options, stream=True)
        session = _session()

        async def attempt() -> aiohttp.ClientResponse:
            try:
                response = await session.post(
                    self._url, data=content, headers=headers, timeout=self._timeout()
                )
            except TimeoutError:
                raise timeout_error(self.settings, self.base_url) from None
            except aiohttp.ClientError as exc:
                raise self._unreachable(exc) from None
            if response.status >= 400:
                raw, whole = await read_body(response, MAX_ERROR_BODY)
                if whole:
                    response.release()
                else:
                    response.close()
                raise self._http_error(response.status, raw, response.headers)
            return response

        response = await with_retries(self.settings, attempt, self._key)
        assembler = StreamAssembler(self.name)
        done = False
        try:
            # read past [DONE] to the end of the body, so the connection goes back to the pool
            async for data in _sse_data(response.content.iter_any()):
                if data == "[DONE]":
                    done = True
                elif not done:
                    delta = assembler.feed(self._json(data))
                    if delta is not None:
                        yield delta
        except ReplyTooLarge:
            response.close()  # the rest is unread: not back to the pool
            raise ReplyTooLarge(self.name, self.base_url) from None
        except TimeoutError:
            if not done:
                raise timeout_error(self.settings, self.base_url) from None
        except aiohttp.ClientError as exc:
            if not done:
                raise self._unreachable(exc, mid_stream=True) from None
        finally:
            response.release()
        yield await self._with_cost(assembler.result())

    def _timeout(self) -> Any:
        if self._client_timeout is None:  # immutable, so one per model
            # deferred: loading aiohttp costs hundreds of ms
            import aiohttp

            self._client_timeout = aiohttp.ClientTimeout(total=self.settings.timeout)
        return self._client_timeout

    async def _with_cost(self, response: ModelResponse) -> ModelResponse:
        """The model's list price from litellm's table, whatever endpoint answered: behind a
        company proxy or gateway (`api_base`) it is the same model at the same price, and a
        call priced at nothing passed every cost gate at $0 (newcomer9 #2). A model the table
        does not know (a self-hosted one) stays unpriced: a `price:` on its role prices it
        (`fim.run.metering`), and a cost limit or `max_cost` check fails closed without one."""
        if not response.usage.total_tokens or response.usage.cost is not None:
            return response

        if catalog.table.cache_info().currsize == 0:
            await asyncio.to_thread(catalog.table)  # a one-off ~20 ms file read
        price = catalog.cost(self.name, response.usage)
        if price is None:
            return response
        usage = response.usage.model_copy(update={"cost": price})
        return response.model_copy(update={"usage": usage})

    # ------------------------------------------------------------------ errors

    def _json(self, raw: bytes | str) -> Any:
        """The parsed body; one that is not JSON fails the call quoting its start, masked
        before it is cut (`quoted`): a gateway's HTML page may echo the request's headers,
        the key among them, and this error reaches every exit."""
        try:
            return loads(raw)
        except ValueError:
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            raise RunError(
                f"{self.name}: {self.base_url} answered with something that is not JSON: "
                f"{quoted(text, self._key, MAX_QUOTED_BODY)!r}",
                hint="api_base must be an OpenAI-compatible endpoint, usually ending in /v1",
            ) from None

    def _http_error(self, status: int, raw: bytes, headers: Any) -> Exception:
        detail = quoted(error_detail(raw), self._key, MAX_ERROR_DETAIL)
        if status == 429 or status >= 500:
            return Transient(
                f"model endpoint returned HTTP {status}",
                detail,
                parse_retry_after(headers.get("retry-after")),
            )
        return status_error(self.settings, status, detail, self._key)

    def _unreachable(self, exc: Exception, mid_stream: bool = False) -> Exception:
        if not mid_stream and connection_refused(exc):
            return cannot_connect(self.settings, self.base_url)
        detail = f"{type(exc).__name__}: {exc}".rstrip(": ")
        if mid_stream:
            return RunError(
                f"{self.name}: connection to {self.base_url} lost mid-stream: {detail}",
                hint="the endpoint closed the stream early; retry, or use a non-streaming run",
            )
        failed = connect_failure(exc)
        dns = " (DNS)" if failed is not None and failed[1] else ""
        return Transient(f"{UNREACHABLE} {self.base_url}{dns}", detail)


class OpenAIBackend(Backend):
    """The fast path: `openai/<name>`, a bare OpenAI name, or any bare name with an
    `api_base` (a local vLLM, llama.cpp, LM Studio...)."""

    name = "openai"

    @classmethod
    def claims(cls, settings: ModelSettings) -> bool:
        model = settings.model
        if model.startswith("openai/"):
            return True
        return "/" not in model and bool(api_base(settings) or provider_of(model) == "openai")

    @classmethod
    def build(cls, settings: ModelSettings, root: Path | None) -> Model:
        return OpenAICompatModel(settings)

    @classmethod
    def key_problem(cls, settings: ModelSettings) -> RunError | None:
        """OpenAI's own endpoint needs OPENAI_API_KEY; any other base URL may not."""
        base = api_base(settings) or environment_base() or OPENAI_BASE
        try:
            resolve_key(settings, "openai", required=base == OPENAI_BASE)
        except RunError as exc:
            return exc
        return None

    @classmethod
    def endpoint(cls, settings: ModelSettings) -> str | None:
        return api_base(settings) or environment_base()
