"""Record and replay model exchanges so evals run offline and deterministically in CI.

A cassette is one JSON file per eval case under `evals/.cassettes/<suite>/<case>.json`,
holding model responses keyed by a hash of (model, messages, tools). Only the request's
content is hashed and only the response is stored: no headers, no API keys, no paths.

Each reply also says where it was recorded (`endpoint`: the origin of the model's
`api_base`, or `default`, the provider's own endpoint; `origin`). Replay refuses a reply
recorded against another endpoint than the project's model settings name now (attack-43
#5: a pull request recorded against a stub that answered what its case expects, restored
fim.yaml, and the gate passed an agent no real model answered). It is a record, not a
proof: the file is committed like code and can say anything, so review `evals/.cassettes/`
as code. A cassette from before the field (`unsourced`) is replayed and the report says so.
A replayed case's latency is its recorded `duration_ms` (`fim.eval.latency`). Each reply
keeps a `fingerprint` of its request (`fim.eval.cassette_fingerprints`): a miss says whose
request missed and which part of it changed.

A cassette is meant to be committed, so it never holds a secret: responses are masked
(`fim.masking`) before they are stored, and the key is the hash of the *masked* request.
That keeps a masked recording replayable: the replayed (masked) reply goes back into the
conversation, the next request masks to the same text, and the key matches. It also makes
keys independent of the secrets' values, so CI replays with other credentials.

Modes: `record` (call the model, store every exchange), `replay` (the default: a recorded
case is played back and a request it lacks is a *cassette miss*, reported as such; a case
never recorded that asks a real model is *skipped*, `NeedsLiveModel`: replay never spends
money or needs a key), `live` (ignore cassettes). A recording keeps the `now` its
instructions rendered with, and a replay renders with it (`Cassette.now_for`), and the
case's tool results (`tool_calls`, version 2, by `tool_key`): a committed file must not make
CI send them (`fim.eval.tool_replay`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any, Literal, TypeVar

from fim.config.files import read_regular, write_inside
from fim.config.schema import ModelSettings
from fim.errors import RunError
from fim.eval.cassette_fingerprints import asker, fingerprint, miss_words
from fim.eval.cassette_hooks import with_cause
from fim.eval.cassette_keys import recorded_now, request_key
from fim.eval.cassette_keys import slug as slug  # the runner names cassettes with it
from fim.eval.cassette_keys import tool_call as tool_call  # where it was first defined
from fim.eval.cassette_keys import tool_key as tool_key
from fim.eval.endpoints import DEFAULT_ENDPOINT, endpoint_words
from fim.eval.endpoints import origin as origin  # where it was first defined
from fim.llm import catalog
from fim.masking import Masker, known
from fim.types import Message, Model, ModelResponse, TextDelta, ToolResult, ToolSpec

M = TypeVar("M", ModelResponse, ToolResult)

Mode = Literal["record", "replay", "live"]

MAX_CASSETTE_BYTES = 64 * 1024 * 1024
"""The largest cassette replayed (one case's exchanges; far past any real recording)."""


class CassetteMiss(RunError):
    """A recorded case made a request its cassette does not hold (its prompt changed)."""


NEEDS_LIVE = "needs a live model"
"""Opening words of `NeedsLiveModel`; the runner finds it in a run's error event."""


class NeedsLiveModel(RunError):
    """In replay, a case with no cassette asked a real model: it is skipped, not failed."""

    HINT = "`fim eval --live` runs it against the model, `--record` stores a cassette"

    def __init__(self, model: str, cassette: Path) -> None:
        super().__init__(f"{NEEDS_LIVE} ({model}), no cassette recorded", hint=self.HINT)

    @classmethod
    def from_message(cls, text: str) -> NeedsLiveModel:
        """Rebuild the error from its text (an agent run reports it as an error event)."""
        error = cls.__new__(cls)
        text = text[text.find(NEEDS_LIVE) :].removesuffix(f" ({cls.HINT})")
        RunError.__init__(error, text, hint=cls.HINT)
        return error


class Cassette:
    """The recorded exchanges of one case; safe to share between concurrent repeats."""

    def __init__(self, path: Path, mode: Mode, masker: Masker | None = None) -> None:
        self.path = path
        self.mode = mode
        self._own = masker or Masker()
        self._seen: Masker | None = None
        self._masker = self._own
        self.entries: dict[str, dict[str, Any]] = {}
        self.tools: dict[str, dict[str, Any]] = {}
        """Recorded tool results by `tool_key`."""
        self._recorded = False
        self._loaded = False
        self.broken: str | None = None
        """Why the recorded file could not be read (the case fails with it, not the eval)."""
        self.now: str | None = None
        """The `now` the case's instructions render with (`now_for`)."""
        self.live_now: str | None = None
        """The current time a replay rendered with, for want of a recorded `now`."""
        self.hooks_now: bool = False
        """Whether this run's case runs with hooks (recorded as `hooks: on|off`)."""
        self.hooks: str | None = None
        """The hooks mode the recording was made in (`on`/`off`; None: not said, older)."""
        self.blocked: set[str] = set()
        """Tools a hook blocked while recording (`fim.eval.cassette_hooks`)."""
        self.hits = 0
        self.misses = 0
        self.replayed: dict[str, set[str]] = {}
        """The keys of the replies replayed, by who asked (a miss says what did replay)."""
        self._lock = asyncio.Lock()

    @property
    def masker(self) -> Masker:
        """The project's secrets and every secret the process knows now (`fim.masking.known`:
        the provider key read from the environment, what a hook exported): the reports mask
        with those, and a cassette is the committed file (attack-26: it kept a key the
        report hid). Read at each use: the process's set grows while the eval runs."""
        latest = known()
        if latest is not self._seen:
            self._seen, self._masker = latest, self._own.union(latest)
        return self._masker

    def load(self) -> None:
        """Read the recorded exchanges (replay): blocking, so the runner reads every
        cassette in a worker thread, never on the event loop; bounded like any project
        file (`fim.config.files.read_regular`)."""
        if self.mode != "replay" or self._loaded:
            return
        self._loaded = True
        try:
            raw, _ = read_regular(self.path, MAX_CASSETTE_BYTES)
        except FileNotFoundError:
            return
        except OSError as exc:
            self.broken = f"cannot read cassette {self.path.name}: {exc.strerror or exc}"
            self._recorded = True
            return
        try:
            data = json.loads(raw)
            self.entries = {e["key"]: e for e in data.get("exchanges", [])}
            self.tools = {e["key"]: e for e in data.get("tool_calls", [])}
            self.now = recorded_now(data.get("now"))
            self.hooks = data.get("hooks") if data.get("hooks") in ("on", "off") else None
            self.blocked = {str(t) for t in data.get("blocked", []) if isinstance(t, str)}
        except RecursionError:  # json.loads of a value nested ~100,000 deep
            self.broken = f"cassette {self.path.name} is not a recording: nested too deep"
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            self.broken = f"cassette {self.path.name} is not a recording: {exc}"
        self._recorded = True

    @property
    def recorded(self) -> bool:
        """Whether a recording exists (read now if `load` was not called first)."""
        self.load()
        return self._recorded

    def models(self) -> list[str]:
        """The models the recording's exchanges were made with (masked, as stored), sorted:
        a miss on a model not among them is a changed model, not a changed prompt."""
        self.load()
        return sorted({str(e["model"]) for e in self.entries.values() if e.get("model")})

    @property
    def unsourced(self) -> bool:
        """A recorded reply does not say which endpoint it came from (recorded before
        cassettes held `endpoint`): replayed, and the report says so once."""
        self.load()
        return any("endpoint" not in e for e in self.entries.values())

    def now_for(self, live: str) -> str:
        """The `now` the case's instructions render with, given the current time `live`
        (`fim.build.instruction_time.rendering_time`): in replay the recorded one (else
        `live`, as before fim kept it); recording, the first the case rendered with, kept
        for the file, so the case's repeats and delegates render the same one."""
        if self.mode == "record":
            self.now = self.now or live
            return self.now
        self.load()
        if self.mode == "replay" and self.now is None:
            self.live_now = live
        return self.now or live

    def recorded_endpoint(self, key: str) -> str | None:
        """Where the reply `key` was recorded (masked, as stored), or None (not said)."""
        value = self.entries.get(key, {}).get("endpoint")
        return None if value is None else str(value)

    def lookup(self, key: str) -> ModelResponse | None:
        return self._entry("entries", key, "response", ModelResponse)

    def tool_result(self, key: str) -> ToolResult | None:
        """The recorded result of the tool call `key`, or None (not recorded)."""
        return self._entry("tools", key, "result", ToolResult)

    def _entry(self, table: str, key: str, field: str, shape: type[M]) -> M | None:
        """`self.<table>[key][field]` as `shape` (read once loaded), None when not recorded; a
        broken file or entry fails the case that asked (it can say anything), not the eval."""
        self.load()
        if self.broken is not None:
            raise RunError(self.broken, hint="`fim eval --record` records the case again")
        entry = getattr(self, table).get(key)
        if entry is None:
            return None
        try:
            return shape.model_validate(entry[field])
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            raise RunError(
                f"cassette {self.path.name} holds a broken {field}: {str(exc)[:300]}",
                hint="`fim eval --record` records the case again",
            ) from None

    async def store_tool(
        self, key: str, name: str, result: ToolResult, code: dict[str, Any] | None = None
    ) -> None:
        """Keep a tool call's result, masked like the model's replies; `code`: the file and
        source hash of a project Python tool (`fim.eval.tool_replay.code_of`)."""
        async with self._lock:
            self.tools[key] = {
                "key": key,
                "tool": self.masker.text(name),
                **({} if code is None else {"code": self.masker.value(code)}),
                "result": self.masker.value(result.model_dump(mode="json")),
            }

    def recorded_duration(self, key: str) -> float | None:
        """How long the call that got reply `key` took when recorded, in ms (its own time,
        its wait for a call slot excluded), or None: recorded before fim stored it."""
        value = self.entries.get(key, {}).get("duration_ms")
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            return None
        return float(value)

    async def store(
        self,
        key: str,
        model: str,
        response: ModelResponse,
        endpoint: str = DEFAULT_ENDPOINT,
        duration_ms: float | None = None,
        print_: dict[str, Any] | None = None,
    ) -> None:
        async with self._lock:
            self.entries[key] = {
                "key": key,
                "model": self.masker.text(model),
                "endpoint": self.masker.text(endpoint),
                **({} if duration_ms is None else {"duration_ms": round(duration_ms, 1)}),
                **({} if print_ is None else {"fingerprint": print_}),
                "response": self.masker.value(response.model_dump(mode="json")),
            }

    def save(self) -> None:
        """Write the recording (blocking: the runner saves in a worker thread) to a new file
        renamed over the old one: a reader never sees half a file, and a link committed in
        its place is replaced, never written through to wherever it points."""
        if self.mode != "record" or not (self.entries or self.tools):
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = {
            "version": 2,
            **({} if self.now is None else {"now": self.now}),
            "hooks": "on" if self.hooks_now else "off",
            **({"blocked": sorted(self.blocked)} if self.blocked else {}),
            "exchanges": sorted(self.entries.values(), key=lambda e: e["key"]),
            "tool_calls": sorted(self.tools.values(), key=lambda e: e["key"]),
        }
        text = json.dumps(body, indent=1, ensure_ascii=False) + "\n"
        write_inside(self.path.parent, self.path, text)


def load_all(cassettes: Iterable[Cassette]) -> None:
    """`Cassette.load` each one (the runner calls it in a worker thread)."""
    for cassette in cassettes:
        cassette.load()


def save_all(cassettes: Iterable[Cassette]) -> None:
    """`Cassette.save` each one (the runner calls it in a worker thread)."""
    for cassette in cassettes:
        cassette.save()


class CassetteModel:
    """Wraps a model (built lazily, so replay needs no API key) with a cassette.
    `endpoint` is where the model's requests go under the project's settings now (`origin`
    of its base URL): recorded with each reply, and compared with it on replay. Each
    recorded reply keeps how long its call took (`clock`); a replayed one hands that to
    `on_replay` (`fim.eval.latency`). `settings` are the model's (its `price:` prices it)."""

    def __init__(
        self,
        name: str,
        factory: Callable[[], Model],
        cassette: Cassette,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        settings: ModelSettings | None = None,
        clock: Callable[[], float] = time.perf_counter,
        on_replay: Callable[[float | None], None] | None = None,
    ) -> None:
        self.name = name
        self._factory = factory
        self._inner: Model | None = None
        self.cassette = cassette
        self.endpoint = endpoint
        self.settings = settings
        self._clock = clock
        self._on_replay = on_replay

    def _model(self) -> Model:
        if self._inner is None:
            self._inner = self._factory()
        return self._inner

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> ModelResponse:
        cassette = self.cassette
        key = request_key(self.name, messages, tools, cassette.masker)
        if cassette.mode == "replay" and not cassette.recorded:
            raise NeedsLiveModel(self.name, cassette.path)
        if cassette.mode == "replay":
            hit = cassette.lookup(key)
            if hit is None:
                cassette.misses += 1
                raise self._miss(messages, tools)
            elsewhere = self._elsewhere(key)
            if elsewhere is not None:
                cassette.misses += 1
                raise elsewhere
            cassette.hits += 1
            cassette.replayed.setdefault(asker(messages), set()).add(key)
            if self._on_replay is not None:
                self._on_replay(cassette.recorded_duration(key))
            return _listed_price(hit, self.name)
        began = self._clock()
        response = await self._model().complete(messages, tools, **options)
        if cassette.mode == "record":
            took = (self._clock() - began) * 1000
            print_ = fingerprint(messages, tools, cassette.masker)
            await cassette.store(key, self.name, response, self.endpoint, took, print_)
        return response

    def _elsewhere(self, key: str) -> CassetteMiss | None:
        """The miss for a reply recorded against another endpoint than this model's now
        (attack-43 #5: recorded against a stub server, fim.yaml restored), or None. A reply
        that does not say where it was recorded is replayed (`Cassette.unsourced`)."""
        cassette = self.cassette
        recorded = cassette.recorded_endpoint(key)
        now = cassette.masker.text(self.endpoint)
        if recorded is None or recorded == now:
            return None
        return CassetteMiss(
            f"cassette miss: {cassette.path.name} was recorded against "
            f"{endpoint_words(recorded)}; this run's {cassette.masker.text(self.name)} "
            f"uses {endpoint_words(now)}",
            hint="recorded against another server than the project's model settings name "
            "now, e.g. a local or stub one: re-record with `fim eval --record`, or set the "
            "api_base (or the base-URL variable: OPENAI_BASE_URL, <PROVIDER>_API_BASE) it "
            "was recorded with",
        )

    def _miss(self, messages: list[Message], tools: list[ToolSpec] | None) -> CassetteMiss:
        """Why a recorded case has no reply for this request (`miss_words`)."""
        text, hint = miss_words(self.cassette, self.name, messages, tools)
        text, hint = with_cause(self.cassette, text, hint)
        return CassetteMiss(text, hint=hint)

    async def stream(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> AsyncIterator[TextDelta | ModelResponse]:
        response = await self.complete(messages, tools, **options)
        if response.message.content:
            yield TextDelta(text=response.message.content)
        yield response


def _listed_price(response: ModelResponse, model: str) -> ModelResponse:
    """A replayed reply recorded with no cost (behind an `api_base`, before fim priced
    those) priced at `model`'s list price now, as a live call is; a `price:` on its role
    is applied over it (`fim.run.metering`)."""
    usage = response.usage
    if usage.cost is not None or not usage.total_tokens:
        return response
    dollars = catalog.cost(model, usage)
    if dollars is None:
        return response
    return response.model_copy(update={"usage": usage.model_copy(update={"cost": dollars})})
