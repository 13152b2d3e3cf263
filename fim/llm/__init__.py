"""Models: one `make_model(settings)` for every provider, chosen from the model string.

- `scripted:<file.yaml>` -> `fim.llm.scripted.ScriptedModel`, a test double that replays a
  YAML script (offline demos and tests; it is not a language model).
- `openai/<name>`, a bare OpenAI name (`gpt-4o-mini`), or any bare name with an
  `api_base` -> the fast path (`openai_compat`): OpenAI-compatible chat.completions over
  a pooled aiohttp session, no litellm import. Local servers (vLLM, llama.cpp, LM Studio,
  Ollama's /v1) use it with `model: openai/<name>` and `api_base: http://127.0.0.1:8000/v1`.
- anything else (`anthropic/`, `gemini/`, `ollama/`, `bedrock/`, `hosted_vllm/` ...) ->
  `litellm_model`, which imports litellm on the first request.

Every backend maps fim Messages/ToolSpecs to the same wire format, retries 429/5xx and
connection errors (not a refused connection) with exponential backoff (`max_retries`,
`extra.retry_backoff`), honours `timeout`, and raises `RunError` with a one-line message a
user can act on — a missing key names the variable to set and never includes a key.
`extra: {tool_calling: false}` wraps the model in the JSON-mode fallback;
`extra: {backend: litellm | openai}` forces a backend. Other `extra` keys pass through to
the provider. Each backend is one file declaring a `fim.llm.backend.Backend` (its name, how
it is chosen, how it builds its model), listed in `BACKEND_MODULES`.

`wrapping_models(wrapper)` routes every model built inside it (and in the tasks it
starts) through `wrapper(settings, build)`: the agent's, the fast model of tool selection
and the context guard, delegates', workflow nodes'. `fim eval` puts a case's cassette
there, so replay stays offline whichever part of a run asks a model.

`ALLOW_MODEL_REQUESTS` is the kill switch for tests: while it is False, a request to any
host but loopback raises `RunError` (tests/conftest.py turns it off for the whole suite).
The value lives in the leaf module `fim.llm.switch`, which the backends read; this
module's attribute reads and writes it, so `fim.llm.ALLOW_MODEL_REQUESTS = False` still
takes effect (it would fail open if it only rebound a name here).
"""

from __future__ import annotations

import gc
import importlib
import logging
import sys
import threading
import types
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fim.config.schema import ModelSettings
from fim.config.serving import MODELS, settings_needed
from fim.errors import RunError
from fim.llm import switch
from fim.llm.backend import BACKENDS, Backend
from fim.types import Message, Model, ModelResponse, TextDelta, ToolSpec

log = logging.getLogger("fim.llm")

if TYPE_CHECKING:
    from fim.build.snapshot import Snapshot
    from fim.config.schema import AgentDecl


class _LlmModule(types.ModuleType):
    """`fim.llm` itself: its `ALLOW_MODEL_REQUESTS` is `fim.llm.switch`'s, read and written."""

    @property
    def ALLOW_MODEL_REQUESTS(self) -> bool:
        return switch.ALLOW_MODEL_REQUESTS

    @ALLOW_MODEL_REQUESTS.setter
    def ALLOW_MODEL_REQUESTS(self, value: bool) -> None:
        switch.ALLOW_MODEL_REQUESTS = value


sys.modules[__name__].__class__ = _LlmModule

__all__ = [
    "BACKEND_MODULES",
    "Backend",
    "ModelWrapper",
    "backend_for",
    "backend_of",
    "backends",
    "fast_model",
    "libraries_for",
    "make_model",
    "models_wrapped",
    "preload",
    "wrapping_models",
]


BACKEND_MODULES = (
    "fim.llm.scripted",
    "fim.llm.openai_compat",
    "fim.llm.local",
    "fim.llm.litellm_model",
)
"""The backends, one file each (see `fim.llm.backend`): importing a file registers its
`Backend`. Imported on the first model built, not with this package; the files are cheap
(their heavy libraries load on a model's first request)."""


def backends() -> dict[str, type[Backend]]:
    """The registry, with every module of `BACKEND_MODULES` imported."""
    for module in BACKEND_MODULES:
        if module not in sys.modules:
            importlib.import_module(module)
    return BACKENDS


def backend_for(settings: ModelSettings) -> type[Backend]:
    """The backend serving `settings`: the one owning its scheme (`scripted:`), else the
    one `extra.backend` names, else the first that claims it, else the fallback."""
    registry = backends()
    model = settings.model
    for backend in registry.values():
        if backend.schemes and model.startswith(backend.schemes):
            return backend
    forced = settings.extra.get("backend")
    if forced is not None:
        choices = [b for b in registry.values() if not b.schemes]
        chosen = next((b for b in choices if b.name == forced), None)
        if chosen is None:
            raise RunError(
                f"{model}: unknown backend {forced!r}",
                hint="extra.backend is one of: " + ", ".join(f"`{b.name}`" for b in choices),
            )
        return chosen
    for backend in registry.values():
        if not backend.fallback and backend.claims(settings):
            return backend
    fallback = next((b for b in registry.values() if b.fallback), None)
    if fallback is None:
        raise RunError(f"{model}: no model backend serves it", hint="check the model string")
    return fallback


def libraries_for(models: Iterable[ModelSettings]) -> list[str]:
    """The heavy libraries (`Backend.libraries`) the backends of `models` import on their
    first request, each once; a model string no backend serves is left to its run."""
    found: dict[str, None] = {}
    for settings in models:
        try:
            found.update(dict.fromkeys(backend_for(settings).libraries))
        except RunError:
            continue
    return list(found)


def preload(models: Iterable[ModelSettings]) -> threading.Thread | None:
    """Import the heavy libraries of `models`' backends on a daemon thread, for a process
    that serves: its first request through litellm would otherwise wait ~3 s for the import.
    What they load then leaves the GC's generations, as the server's start-up did
    (`fim.server.settle_heap`). None when there is nothing to import."""
    needed = [name for name in libraries_for(models) if name not in sys.modules]
    if not needed:
        return None

    def load() -> None:
        for name in needed:
            try:
                importlib.import_module(name)
            except Exception:  # the model's first request reports a broken install
                log.warning("could not preload %s", name, exc_info=True)
        gc.freeze()

    thread = threading.Thread(target=load, name="fim-preload", daemon=True)
    thread.start()
    return thread


def backend_of(settings: ModelSettings) -> str:
    """The name of the backend for a model's settings: `scripted`, `openai` (the fast
    path), `litellm`, or a backend added in its own file."""
    return backend_for(settings).name


ModelWrapper = Callable[[ModelSettings, Callable[[], Model]], Model]
_WRAPPER: ContextVar[ModelWrapper | None] = ContextVar("fim_model_wrapper", default=None)


@contextmanager
def wrapping_models(wrapper: ModelWrapper) -> Iterator[None]:
    """Within this block, `make_model(settings)` returns `wrapper(settings, build)`, where
    `build()` makes the real model (call it lazily: replay needs no key)."""
    token = _WRAPPER.set(wrapper)
    try:
        yield
    finally:
        _WRAPPER.reset(token)


def models_wrapped() -> bool:
    """True inside `wrapping_models` (e.g. an eval case replaying a cassette): what a model
    needs, such as a key, cannot be known from its settings alone."""
    return _WRAPPER.get() is not None


def make_model(settings: ModelSettings, root: Path | None = None) -> Model:
    """Build the Model for `settings`. Cheap and offline: keys are checked, and heavy
    libraries imported, on the first request, so compiling a project never needs them.

    `root` resolves the file of a `scripted:` model (the project root; default: cwd).
    """
    wrapper = _WRAPPER.get()
    if wrapper is not None:
        return wrapper(settings, lambda: _build(settings, root))
    return _build(settings, root)


def fast_model(snapshot: Snapshot, agent: AgentDecl) -> Model:
    """The `fast` role's model, or the agent's own when the project declares no `fast`
    (tool selection, the context guard and MCP sampling ask it)."""
    try:
        settings = snapshot.model_settings("fast")
    except RunError:
        settings = snapshot.model_settings(agent.model)
    return make_model(settings, snapshot.root)


def _build(settings: ModelSettings, root: Path | None) -> Model:
    model = backend_for(settings).build(settings, root)
    if settings.extra.get("tool_calling") is False:
        # deferred: loading fim.llm.jsonmode costs a few ms
        from fim.llm.jsonmode import JsonModeModel

        model = JsonModeModel(model)
    if MODELS not in settings_needed():
        return _Unread(model)
    return model


class _Unread:
    """A model built by a command that compiled the project with a model's unset `${VAR}`
    settings left out (`fim.config.serving`: `fim validate`, `show --prompt` in a job with
    no secrets): it shows what it is, and fails closed if asked for a reply, which would go
    to the provider's default endpoint without the settings the project wrote."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.name = inner.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _refuse(self) -> RunError:
        return RunError(
            f"{self.name}: this command does not read model settings, so it may not call a model",
            hint="the commands that call models (fim run, eval, serve) read them whole",
        )

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> ModelResponse:
        raise self._refuse()

    def stream(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> AsyncIterator[TextDelta | ModelResponse]:
        raise self._refuse()
