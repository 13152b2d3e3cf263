"""What a model backend is made of, and the registry `fim.llm.make_model` chooses from.

A backend is one `Backend` subclass, next to its model class in one file listed in
`fim.llm.BACKEND_MODULES` (imported the first time a model is built, so `import fim.llm`
stays cheap). Its class carries:

- `name`: what `extra: {backend: <name>}` forces, and what `fim.llm.backend_of` returns;
- how it is chosen, at least one of: `schemes`, model-string prefixes it owns outright
  (`scripted:`; nothing redirects them), `claims(settings)`, asked in registration order
  after `extra.backend`, or `fallback = True` for the one backend that takes the rest;
- `build(settings, root)`: the Model. It must stay cheap and offline: a backend's heavy
  library (litellm costs ~1 s) is imported on the model's first request, never here or at
  module import.

Creating a subclass registers it; one without a name, a way to be chosen or `build`, with a
taken name or a second fallback, is a `TypeError` when its module is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from fim.errors import RunError

if TYPE_CHECKING:
    from fim.config.schema import ModelSettings
    from fim.types import Model

BACKENDS: dict[str, type[Backend]] = {}
"""Backend name -> class, in registration order (the order `claims` is asked in)."""


class Backend:
    """One way of reaching models; subclasses are never instantiated (class methods only)."""

    name: ClassVar[str] = ""
    schemes: ClassVar[tuple[str, ...]] = ()
    fallback: ClassVar[bool] = False
    libraries: ClassVar[tuple[str, ...]] = ()
    """Heavy modules its models import on their first request (`litellm`); a server
    imports them at start, on a thread (`fim.llm.preload`)."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        where = f"model backend {cls.__module__}.{cls.__qualname__}"
        if not isinstance(cls.name, str) or not cls.name:
            raise TypeError(f"{where} has no name: declare `name: ClassVar[str] = '<name>'`")
        missing = []
        if cls.build.__func__ is Backend.build.__func__:  # type: ignore[attr-defined]
            missing.append("build(settings, root)")
        chosen = cls.schemes or cls.fallback
        if not chosen and cls.claims.__func__ is Backend.claims.__func__:  # type: ignore[attr-defined]
            missing.append("way to be chosen (schemes, claims(settings) or fallback)")
        if missing:
            raise TypeError(
                f"{where} ('{cls.name}') has no {' and no '.join(missing)}: a backend declares "
                "how it is chosen and how it builds its model in the same class"
            )
        taken = BACKENDS.get(cls.name)
        if taken is not None and _key(taken) != _key(cls):
            raise TypeError(f"{where}: backend '{cls.name}' is already {'.'.join(_key(taken))}")
        other = next((b for b in BACKENDS.values() if b.fallback and b.name != cls.name), None)
        if cls.fallback and other is not None:
            raise TypeError(f"{where}: '{other.name}' is already the fallback backend")
        BACKENDS[cls.name] = cls

    @classmethod
    def claims(cls, settings: ModelSettings) -> bool:
        """True when this backend serves `settings` (its model string, `api_base`...)."""
        return False

    @classmethod
    def build(cls, settings: ModelSettings, root: Path | None) -> Model:
        """The model for `settings`; `root` resolves project-relative files."""
        raise NotImplementedError

    @classmethod
    def key_problem(cls, settings: ModelSettings) -> RunError | None:
        """The error the first request would raise for a missing API key. Default: the
        provider's key (`anthropic/...` -> ANTHROPIC_API_KEY) unless an `api_base` is set."""
        # deferred: fim.llm.base loads the config schema; this module stays import-light
        from fim.llm.base import KEY_ENV, api_base, provider_of, resolve_key

        provider = provider_of(settings.model)
        try:
            resolve_key(
                settings, provider, required=api_base(settings) is None and provider in KEY_ENV
            )
        except RunError as exc:
            return exc
        return None

    @classmethod
    def endpoint(cls, settings: ModelSettings) -> str | None:
        """The URL requests go to when fim can tell without a request (an `api_base`, a
        local provider's default port such as Ollama's :11434), else None."""
        # deferred: fim.llm.base loads the config schema; this module stays import-light
        from fim.llm.base import LOCAL_PROVIDERS, api_base, provider_of

        url = api_base(settings)
        if url is None and provider_of(settings.model) in LOCAL_PROVIDERS:
            url = f"http://localhost:{LOCAL_PROVIDERS[provider_of(settings.model)]}"
        return url


def _key(cls: type) -> tuple[str, str]:
    return (cls.__module__, cls.__qualname__)


__all__ = ["BACKENDS", "Backend"]
