"""What every HTTP-backed model shares: provider facts, API keys, the request guard, the
retry policy (`fim.retries`) and request options.

Backends translate their own exceptions into `Transient` (worth retrying: 429, 5xx,
connection errors) or a final `RunError` (a refused connection is final: nothing listens
there, so "cannot connect to URL" comes at once); `with_retries` owns backoff and the wording of
the error a user sees, so both backends fail the same way. Timeouts are not retried:
`timeout` is the longest a user waits for one model call, not one attempt of it.
"""

from __future__ import annotations

import functools
import os
import re
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from fim.config.schema import ModelSettings
from fim.errors import Abandoned, RunError
from fim.hosts import is_loopback
from fim.llm import switch
from fim.llm.wire import messages_to_wire, tools_to_wire
from fim.retries import Backoff, Sleep, retry_async

if TYPE_CHECKING:
    from fim.types import Message, ToolSpec

T = TypeVar("T")

RESERVED_EXTRA = frozenset({"tool_calling", "retry_backoff", "backend"})
"""Keys of `ModelSettings.extra` that configure fim itself and are not sent to providers:
`tool_calling: false` (JSON-mode fallback), `retry_backoff` (first backoff delay, seconds),
`backend: openai | litellm` (force a backend)."""

OPENAI_BASE = "https://api.openai.com/v1"

KEY_ENV: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "groq": ("GROQ_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "cohere": ("COHERE_API_KEY",),
    "cohere_chat": ("COHERE_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "together_ai": ("TOGETHERAI_API_KEY", "TOGETHER_AI_API_KEY", "TOGETHER_API_KEY"),
    "fireworks_ai": ("FIREWORKS_AI_API_KEY", "FIREWORKS_API_KEY"),
    "perplexity": ("PERPLEXITYAI_API_KEY", "PERPLEXITY_API_KEY"),
    "cerebras": ("CEREBRAS_API_KEY",),
    "azure": ("AZURE_API_KEY", "AZURE_OPENAI_API_KEY"),
}
"""Environment variables litellm reads for the main hosted providers. Providers not listed
(bedrock, vertex_ai, ollama ...) authenticate otherwise or not at all."""

LOCAL_PROVIDERS = {"ollama": 11434, "ollama_chat": 11434, "lm_studio": 1234}
"""Providers whose default endpoint is on this machine."""

_OPENAI_BARE_PREFIXES = ("gpt-", "o1", "o3", "o4", "chatgpt-")


def provider_of(model: str) -> str:
    """`anthropic/claude-x` -> `anthropic`; a bare OpenAI name (`gpt-4o`) -> `openai`."""
    if "/" in model:
        return model.split("/", 1)[0]
    return "openai" if model.startswith(_OPENAI_BARE_PREFIXES) else ""


def api_base(settings: ModelSettings) -> str | None:
    """The configured base URL; `${OPENAI_BASE_URL:-}` resolving to "" means none."""
    return (settings.api_base or "").strip() or None


PLACEHOLDER_KEY_CHARS = 20
"""Hosted providers' keys are 32-160 characters; anything shorter is not remembered as a
secret (`resolve_key`)."""


def resolve_key(settings: ModelSettings, provider: str, required: bool) -> str | None:
    """The API key from settings or the provider's environment variable.

    Raises before any request when a hosted provider needs a key and none is set; the
    message names the variable and never contains a key.

    The key found is remembered as a secret (`fim.masking.remember`), so every exit masks
    it as it masks a `${VAR}`: a key taken implicitly from `OPENAI_API_KEY` is written in
    no declaration, and a provider or gateway that quotes it (an error message, an HTML
    page) would otherwise carry it into responses, the store, logs and eval reports.
    A run's preflight resolves its model's key, so this happens before the run starts.
    A key shorter than `PLACEHOLDER_KEY_CHARS` is a local server's placeholder
    (`OPENAI_API_KEY=ollama`, `EMPTY`): masking it would deface every model name and
    message that contains the word.
    """
    key = settings.api_key
    names = KEY_ENV.get(provider, ())
    if not key:
        key = next((os.environ[name] for name in names if os.environ.get(name)), None)
    if key:
        if len(key) >= PLACEHOLDER_KEY_CHARS:
            # deferred: loading fim.masking costs a few ms
            from fim.masking import remember

            remember([key])
        return key
    if required and names:
        raise RunError(
            f"missing API key for {settings.model}",
            hint=f"set {names[0]}, or FIM_MODEL=ollama/qwen2.5 to use another provider",
        )
    return None


def check_allowed(url: str, model: str) -> None:
    """Refuse non-loopback model requests while `fim.llm.ALLOW_MODEL_REQUESTS` is False (the
    test suite sets it, so no test can reach a paid model by accident)."""
    if not switch.ALLOW_MODEL_REQUESTS and not is_loopback(url):
        raise RunError(
            f"model requests are disabled (fim.llm.ALLOW_MODEL_REQUESTS is False): "
            f"refusing to call {model} at {url}",
            hint="use fim.llm.scripted.ScriptedModel or an OpenAIStubServer on 127.0.0.1",
        )


def scrub(text: str, secret: str | None) -> str:
    """Remove a key from text that may echo it (some providers quote the key they got), in
    every encoding, together with every secret the process knows (`fim.masking`)."""
    # deferred: loading fim.masking costs a few ms
    from fim.masking import Masker, known

    return known().text(Masker([secret] if secret else []).text(text))


MAX_ERROR_DETAIL = 500
"""The most of a provider's error message an error quotes (`quoted`)."""


def quoted(text: str, secret: str | None, limit: int) -> str:
    """At most `limit` characters of `text` (a provider's error message, the start of a
    body that is not JSON) to quote in an error, with every secret the process knows and
    `secret` (the key the request sent) masked.

    Masked whole, then cut (`Masker.head`, which also masks a piece at the cut that could
    begin a secret): a text cut first keeps the part of a key before the cut, which no form
    of the key matches any more, and an endpoint decides where in its message the key is.
    """
    # deferred: loading fim.masking costs a few ms
    from fim.masking import known

    masker = known()
    if secret and secret not in masker.secrets:
        masker = masker.union([secret])
    shown, _ = masker.head(text, limit)
    return masker.text(shown)  # `head` leaves a text that needs no cut as it is


def request_options(settings: ModelSettings, options: dict[str, Any]) -> dict[str, Any]:
    """Provider keyword arguments: settings, then `extra`, then per-call options."""
    out: dict[str, Any] = {}
    if settings.temperature is not None:
        out["temperature"] = settings.temperature
    if settings.max_tokens is not None:
        out["max_tokens"] = settings.max_tokens
    if settings.extra:  # most models have none: no comprehension per call
        out.update({k: v for k, v in settings.extra.items() if k not in RESERVED_EXTRA})
    if options:
        out.update(options)
    return out


class Transient(Exception):
    """A failure worth retrying (HTTP 429/5xx, connection refused or reset)."""

    def __init__(self, summary: str, detail: str, retry_after: float | None = None) -> None:
        super().__init__(f"{summary}: {detail}")
        self.summary = summary
        self.detail = detail
        self.retry_after = retry_after


@functools.lru_cache(maxsize=64)
def _policy(attempts: int, first: float) -> Backoff:
    """The backoff of a model call (immutable, so one per setting: every call asks)."""
    return Backoff(attempts, first, jitter=0.25)


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, Transient)


def _retry_after(exc: BaseException) -> float | None:
    return getattr(exc, "retry_after", None)


async def with_retries(
    settings: ModelSettings,
    attempt: Callable[[], Awaitable[T]],
    secret: str | None = None,
    sleep: Sleep | None = None,
) -> T:
    """Run `attempt` up to `max_retries + 1` times on the one retry policy (`fim.retries`).

    The first delay is `extra.retry_backoff` (default 0.5 s), doubling each time, plus up to
    a quarter of jitter; a Retry-After header wins when larger. Only `Transient` failures are
    retried. The final error says what failed and how often.
    """
    attempts = max(0, settings.max_retries) + 1
    policy = _policy(attempts, float(settings.extra.get("retry_backoff", 0.5)))
    try:
        return await retry_async(
            attempt, policy, retry_on=_transient, retry_after=_retry_after, sleep=sleep
        )
    except Transient as exc:
        times = "1 attempt" if attempts == 1 else f"{attempts} attempts"
        unreachable = exc.summary.startswith(UNREACHABLE)
        raise RunError(
            scrub(f"{settings.model}: {exc.summary} after {times}: {exc.detail}", secret),
            hint=NETWORK_HINT
            if unreachable
            else "the endpoint is failing or rate-limiting; retry later, "
            "or raise max_retries in the model settings",
        ) from None


UNREACHABLE = "cannot reach model endpoint"
"""How both backends' `Transient` for a failed connection begins (DNS, reset, TLS): no
HTTP answer came, so the endpoint is not rate-limiting; the network or the URL is wrong."""

NETWORK_HINT = (
    "no answer from the endpoint: check the network, DNS and proxy (HTTPS_PROXY), "
    "or api_base / OPENAI_BASE_URL"
)


def connection_refused(exc: BaseException) -> bool:
    """True when `exc`, or an exception it was raised from, is a refused connection: nothing
    listens at the endpoint, so retrying in a second will not help (an Ollama not started,
    a wrong port). litellm wraps it three levels deep, with an HTTP 500 status on top."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, ConnectionRefusedError) or isinstance(
            getattr(seen, "os_error", None), ConnectionRefusedError
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


_DNS_WORDS = re.compile(
    r"Name or service not known|nodename nor servname|getaddrinfo failed|"
    r"Temporary failure in name resolution|No address associated with hostname"
)
_HOST_IN_TEXT = re.compile(r"Cannot connect to host \[?([^\s:\]]+)")


def connect_failure(exc: BaseException) -> tuple[str | None, bool] | None:
    """(the host, whether its name did not resolve) when `exc`, or an exception it was
    raised from, is a socket-level failure (an `OSError`: DNS, reset, TLS): no HTTP answer
    came, whatever status is on top (litellm labels a gemini or anthropic DNS failure
    HTTP 500). None otherwise. The host is the one the error names, when it names one."""
    seen: BaseException | None = exc
    found: tuple[str | None, bool] | None = None
    for _ in range(8):
        if seen is None:
            break
        cause = getattr(seen, "os_error", None)
        if isinstance(seen, OSError) or isinstance(cause, OSError):
            host = getattr(seen, "host", None)
            dns = isinstance(seen, socket.gaierror) or isinstance(cause, socket.gaierror)
            dns = dns or bool(_DNS_WORDS.search(str(seen)))
            found = (
                (found[0] if found else None) or (host if isinstance(host, str) else None),
                dns or (found[1] if found else False),
            )
        seen = seen.__cause__ or seen.__context__
    if found is not None and found[0] is None:
        named = _HOST_IN_TEXT.search(str(exc))
        found = (named.group(1) if named else None, found[1])
    return found


def cannot_connect(settings: ModelSettings, url: str) -> RunError:
    """The error for a refused connection: at once, no retries, naming the URL with its
    password and credential query values masked (`masked_url`): preflight reads a local
    provider's `OLLAMA_API_BASE` without building the model, so nothing remembered them."""
    # deferred: loading fim.masking costs a few ms
    from fim.masking import masked_url

    local = is_loopback(url)
    return RunError(
        f"{settings.model}: cannot connect to {masked_url(url)} (connection refused)",
        hint="start the local model server (e.g. `ollama serve`), or fix api_base / OPENAI_BASE_URL"
        if local
        else "check api_base and that the endpoint is up; a proxy (HTTPS_PROXY) or "
        "firewall may refuse it",
    )


def timeout_error(settings: ModelSettings, where: str) -> RunError:
    return Abandoned(
        f"{settings.model}: model request timed out after {settings.timeout:g}s ({where})",
        hint="raise `timeout` in the model settings, or check that the endpoint is responsive",
    )


def status_error(settings: ModelSettings, status: int, detail: str, secret: str | None) -> RunError:
    """A non-retryable HTTP error, with the hint that usually fixes it."""
    hints = {
        401: "the API key was rejected; check the key or its environment variable",
        403: "the API key lacks access to this model",
        404: "check the model name and api_base",
        400: "the provider rejected the request; check the model's options",
    }
    return RunError(
        scrub(f"{settings.model}: model endpoint returned HTTP {status}: {detail}", secret),
        hint=hints.get(status),
    )


def chat_request(
    model: str,
    messages: list[Message],
    tools: list[ToolSpec] | None,
    settings: ModelSettings,
    options: dict[str, Any],
) -> dict[str, Any]:
    """The chat.completions arguments every backend sends: model, messages, tools (when
    any) and the provider options, in the OpenAI wire format."""

    request: dict[str, Any] = {"model": model, "messages": messages_to_wire(messages)}
    wire_tools = tools_to_wire(tools)
    if wire_tools:
        request["tools"] = wire_tools
    request.update(request_options(settings, options))
    return request
