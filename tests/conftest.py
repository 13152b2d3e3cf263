"""Suite-wide safety: no test can reach a real (paid) model.

`fim.llm.ALLOW_MODEL_REQUESTS = False` makes every model backend refuse a request to any
host but loopback, so tests use `fim.llm.scripted.ScriptedModel` or an `OpenAIStubServer`
on 127.0.0.1. litellm, if a test imports it, reads its bundled price map instead of
downloading one.
"""

from __future__ import annotations

import asyncio
import gc
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fim.testing.otlp import Receiver, otlp_receiver
from tests.pg_schemas import pg_schema

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
for _var in ("FIM_MODEL", "FIM_FAST_MODEL"):  # a developer's own override must not leak in
    os.environ.pop(_var, None)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Byte-compile fim once, as installing a package does. The suite starts hundreds of
    `python -m fim.cli` processes, and where PYTHONDONTWRITEBYTECODE is set (CI, this
    machine) each would compile every fim module it imports from source again: ~50 ms
    of CPU for `fim validate`, more for `fim serve`."""
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller has done it
    # deferred: only the session's start needs it
    import compileall

    here = Path(__file__).resolve().parent
    compileall.compile_dir(str(here.parent / "fim"), quiet=1)
    for helper in [*here.glob("*.py"), *here.glob("mcp_servers/*.py")]:  # imported plainly
        if not helper.name.startswith("test_") and helper.name != "conftest.py":
            compileall.compile_file(str(helper), quiet=1)
    _rewrite_tests_once(session.config, here)


def _rewrite_tests_once(config: pytest.Config, here: Path) -> None:
    """Write the assertion-rewritten bytecode of every test module, as pytest itself does
    where PYTHONDONTWRITEBYTECODE is unset. Where it is set, each xdist worker parsed,
    rewrote and compiled all ~150 test modules again: ~5 s of CPU a worker. Uses pytest's
    own (private) rewriting, so what the workers load is what they would have made; with a
    pytest that lacks it, each worker compiles as before."""
    try:
        # deferred: pytest internals, only the controller's start needs them
        from _pytest.assertion import rewrite
    except ImportError:
        return
    needed = ("_rewrite_test", "_write_pyc", "_read_pyc", "get_cache_dir", "PYC_TAIL")
    needed += ("assertstate_key",)
    if not all(hasattr(rewrite, name) for name in needed):
        return
    state = config.stash.get(rewrite.assertstate_key, None)
    if state is None:  # --assert=plain: nothing is rewritten
        return
    for path in sorted([*here.glob("test_*.py"), *here.glob("*/test_*.py"), here / "conftest.py"]):
        cache = rewrite.get_cache_dir(path)
        pyc = cache / (path.name[:-3] + rewrite.PYC_TAIL)
        if rewrite._read_pyc(path, pyc, state.trace) is not None:
            continue  # already current
        cache.mkdir(exist_ok=True)
        try:
            stat, code = rewrite._rewrite_test(path, config)
        except SyntaxError:
            continue  # the worker reports it, as a collection error
        rewrite._write_pyc(state, code, stat, pyc)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the modules that hold a `litellm` test first, each module's tests together and
    in their order. Importing litellm costs a process ~3.5 s of CPU, and the tests that do
    were spread over the suite, so each xdist worker imported it (three times per run).
    `--dist worksteal` hands each worker a contiguous third of this order and steals only
    from a queue's end, so these modules start together on the first worker, which imports
    it once. Every worker sorts its collection the same way, as xdist requires."""
    first = {item.module for item in items if item.get_closest_marker("litellm")}
    items.sort(key=lambda item: item.module not in first)  # stable: keeps each module's order


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Collect the run's garbage once, then freeze what is left. pytest's check for
    unraisable exceptions then runs its five full collections over nothing but what
    finalizers make, and the process exits without walking the heap again: on an xdist
    worker that heap (every module the tests imported) cost seconds after its last test.
    `trylast`: after session-scoped fixtures are torn down, so their garbage is collected
    here and a finalizer's exception still reaches pytest's unraisable hook."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True, scope="session")
def _warm_mcp_servers() -> Iterator[None]:
    """The zygote of tests/mcp_servers/launch.py for this test process: each stdio test
    server that fim starts from here is forked from a process that imported the MCP SDK
    once, instead of importing it itself (~0.7 s of CPU each, dozens of servers). fim
    still starts, talks to and stops a process of its own; see launch.py."""
    import subprocess
    import sys

    launch = Path(__file__).resolve().parent / "mcp_servers" / "launch.py"
    # what fim passes a stdio server (the SDK's set and fim.mcp.transport.PASSED_ENV): the
    # interpreter starts as a server's would (no PYTHONUNBUFFERED), and a server reading
    # /proc/self/environ finds no secret of the test process's
    kept = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "LC_CTYPE")
    kept += ("TMPDIR", "VIRTUAL_ENV", "PYENV_ROOT", "PYENV_VERSION")
    env = {k: v for k, v in os.environ.items() if k in kept}
    zygote = subprocess.Popen(
        [sys.executable, str(launch), "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # a test's signal to its own group never reaches it
    )
    yield
    assert zygote.stdin is not None
    zygote.stdin.close()  # it ends; servers it started end with their relays
    try:
        zygote.wait(10)
    except subprocess.TimeoutExpired:
        zygote.kill()
        zygote.wait()


@pytest.fixture(autouse=True, scope="session")
def _one_default_tls_context() -> Iterator[None]:
    """Every httpx client builds a TLS context, even for `http://127.0.0.1`: reading the CA
    bundle costs ~25 ms of CPU, and the tests' `httpx.get(...)`/`httpx.post(...)` (each a
    client of its own; some in polling loops) made thousands of them. Here a context with
    verification on (certifi's CAs, or SSL_CERT_FILE's or SSL_CERT_DIR's, which httpx
    reads) is built once for the same CA file (path, size, time, inode) and shared, as
    fim.llm.openai_compat shares its own; any other (`verify=False`, a context, a client
    certificate) is built as before. httpx only ever sets the same ALPN protocol list on
    it (no client here enables HTTP/2)."""
    import ssl

    import httpx
    from httpx._transports import default as transports

    made = transports.create_ssl_context
    shared: dict[tuple[Any, ...], ssl.SSLContext] = {}

    def create(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
        if verify is not True or cert:
            return made(verify, cert, trust_env)
        cafile = os.environ.get("SSL_CERT_FILE", "") if trust_env else ""
        capath = os.environ.get("SSL_CERT_DIR", "") if trust_env else ""
        try:
            seen = os.stat(cafile) if cafile else None
        except OSError:
            return made(verify, cert, trust_env)  # httpx reports it
        key = (cafile, capath, seen and (seen.st_ino, seen.st_size, seen.st_mtime_ns))
        if key not in shared:
            shared[key] = made(True, None, trust_env)
        return shared[key]

    transports.create_ssl_context = create
    httpx.create_ssl_context = create  # fim.tools.builtin._pinned calls it by this name
    yield
    transports.create_ssl_context = made
    httpx.create_ssl_context = made


@pytest.fixture(autouse=True, scope="session")
def _typer_reads_each_signature_once() -> Iterator[None]:
    """typer builds its click command from the app on every invocation, and for each
    command reads its function's signature with `get_type_hints` (evaluating every string
    annotation): ~50 ms of CPU each time the tests run `fim` in-process (`run_fim`, a
    CliRunner), most of what a quick command costs. Here that reading is done once per
    function object and shared; typer only reads the result. A function replaced by a
    test (monkeypatch) is a new object, so it is read afresh; click's commands and
    parameters are still built anew for each invocation, as before."""
    import weakref

    import typer.completion
    import typer.main
    import typer.utils

    read = typer.utils.get_params_from_function
    seen: weakref.WeakKeyDictionary[Callable[..., Any], dict[str, Any]]
    seen = weakref.WeakKeyDictionary()

    def once(func: Callable[..., Any]) -> dict[str, Any]:
        try:
            params = seen.get(func)
        except TypeError:  # not weakly referenceable (a builtin): read each time
            return read(func)
        if params is None:
            params = seen[func] = read(func)
        return dict(params)  # typer never changes it; a caller gets a dict of its own

    patched = (typer.main, typer.completion)
    for module in patched:
        module.get_params_from_function = once  # type: ignore[attr-defined]
    yield
    for module in patched:
        module.get_params_from_function = read  # type: ignore[attr-defined]


@pytest.fixture(autouse=True, scope="session")
def _same_suite_in_ci_and_at_a_desk() -> Iterator[None]:
    """fim behaves differently where `CI` or `GITHUB_ACTIONS` is set (the editor note is
    quiet there), and CI runners set both: the suite runs as at a developer's desk, and a
    test about CI sets the variable itself. A test that passed here failed only in CI."""
    import os

    saved = {name: os.environ.pop(name) for name in ("CI", "GITHUB_ACTIONS") if name in os.environ}
    yield
    os.environ.update(saved)


@pytest.fixture(autouse=True)
def _commands_put_back_what_they_need() -> Iterator[None]:
    """A command run in-process sets which settings it needs whole (`fim.config.serving`)
    and must put that back: one that did not (`fim workflow` invoked as a group of its
    own) left a lenient setting behind, and a later test's model refused to be called."""
    from fim.config.serving import GROUPS, need_settings, settings_needed

    yield
    left = settings_needed()
    if left != GROUPS:
        need_settings(GROUPS)
        pytest.fail(f"the test left the settings needed at {sorted(left)}")


@pytest.fixture(autouse=True, scope="session")
def _no_model_requests() -> Iterator[None]:
    import fim.llm

    previous = fim.llm.ALLOW_MODEL_REQUESTS
    fim.llm.ALLOW_MODEL_REQUESTS = False
    yield
    fim.llm.ALLOW_MODEL_REQUESTS = previous


# ----------------------------------------------------------------------------- PostgreSQL


@dataclass
class PgDatabase:
    """A throwaway database owned by a non-superuser role, plus a role that can only read.

    `admin_url` is the server's superuser (FIM_TEST_POSTGRES_URL) on this database,
    `owner_url` the owner (created the tables), `reader_url` the read-only role a
    `read_only: true` connector must use.
    """

    name: str
    owner: str
    reader: str
    admin_url: str
    owner_url: str
    reader_url: str


@pytest.fixture(scope="module")
def pg_database() -> Iterator[Callable[[str], PgDatabase]]:
    """`pg_database(seed_sql)`: a fresh database per call, dropped with its roles after
    the module. Skips when FIM_TEST_POSTGRES_URL (a superuser URL; CI sets it) is unset."""
    server = os.environ.get("FIM_TEST_POSTGRES_URL")
    if not server:
        pytest.skip("FIM_TEST_POSTGRES_URL is not set (CI starts a PostgreSQL server)")
    import psycopg
    from sqlalchemy.engine import make_url

    base = make_url(server.replace("postgresql+psycopg://", "postgresql://"))
    created: list[PgDatabase] = []

    def url(user: str | None, database: str) -> str:
        target = base.set(database=database)
        if user is not None:
            target = target.set(username=user, password=None)
        return target.render_as_string(hide_password=False)

    def make(seed: str) -> PgDatabase:
        tag = uuid.uuid4().hex[:8]
        db = PgDatabase(
            f"fim_t_{tag}",
            f"fim_owner_{tag}",
            f"fim_reader_{tag}",
            "",
            "",
            "",
        )
        db.admin_url = url(None, db.name)
        db.owner_url = url(db.owner, db.name)
        db.reader_url = url(db.reader, db.name)
        with psycopg.connect(url(None, base.database or "postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {db.owner} LOGIN")
            conn.execute(f"CREATE ROLE {db.reader} LOGIN")
            conn.execute(f"CREATE DATABASE {db.name} OWNER {db.owner}")
        created.append(db)
        with psycopg.connect(db.admin_url, autocommit=True) as conn:
            # servers older than PostgreSQL 15 let everyone create objects in public
            conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
            conn.execute(f"ALTER SCHEMA public OWNER TO {db.owner}")
        with psycopg.connect(db.owner_url, autocommit=True) as conn:
            conn.execute(seed)
            conn.execute(f"GRANT CONNECT ON DATABASE {db.name} TO {db.reader}")
            conn.execute(f"GRANT USAGE ON SCHEMA public TO {db.reader}")
            conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {db.reader}")
        return db

    yield make
    with psycopg.connect(url(None, base.database or "postgres"), autocommit=True) as conn:
        for db in created:
            conn.execute(f"DROP DATABASE IF EXISTS {db.name} WITH (FORCE)")
            conn.execute(f"DROP ROLE IF EXISTS {db.reader}")
            conn.execute(f"DROP ROLE IF EXISTS {db.owner}")


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty state database URL of each backend (PostgreSQL: a schema of its own
    in FIM_TEST_POSTGRES_URL, skipped without it)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/state/fim.db"
        return
    with pg_schema() as url:
        yield url


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """A real OTLP/HTTP receiver (`fim.testing.otlp`) that the run's tracing exports to,
    prompts and completions captured; the process's tracer is rebuilt around the test."""
    from fim import observe

    with otlp_receiver() as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
        monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
        observe.reset()
        try:
            yield rx
        finally:
            observe.reset()


class Ticker:
    """Counts event-loop iterations while hostile work runs: a blocked loop counts none."""

    def __init__(self) -> None:
        self.ticks = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(0.005)
            self.ticks += 1


@pytest.fixture
async def ticker() -> AsyncIterator[Ticker]:
    # deferred: the worker pool (pebble, multiprocessing) only for the tests that count
    from fim.tools import isolate

    await isolate.pool()  # started before counting: its one-off start-up is not the test
    counter = Ticker()
    task = asyncio.create_task(counter.run())
    yield counter
    task.cancel()
