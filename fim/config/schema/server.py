"""fim.yaml's `server:` block: what `fim serve` listens on, who may call it (bearer keys,
tenants, operators), what each key may do and spend, and how it sits behind a proxy."""

from __future__ import annotations

import ipaddress

from pydantic import Field, field_validator

from fim.config.schema.base import Strict, empty_list
from fim.config.schema.spend import Budget

KEY_NAME_MAX = 64
KEY_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class TenantKey(Strict):
    """A bearer key of a named tenant: every key of one tenant sees the same sessions, runs
    and approvals, so a key is rotated by adding the new one under the same tenant and
    removing the old one later. `name` labels the key where its usage is shown (`fim usage
    --by key`, `GET /v1/usage?by=key`); a key with a name and no tenant owns its runs alone,
    as a plain key does."""

    key: str
    """The bearer key; use `${VAR}` so it stays out of git."""
    tenant: str = Field(default="", max_length=200)
    """Name of the tenant: its keys share sessions, runs and approvals (none: the key's own)."""
    name: str | None = Field(
        default=None, min_length=1, max_length=KEY_NAME_MAX, pattern=KEY_NAME_PATTERN
    )
    """A label for the key in usage reports instead of its place in fim.yaml: letters,
    digits, `.`, `_` and `-` only, unique among the keys, so no name reads like another
    key's label (`tenant acme (...)`, `server.operator_keys[0]`) or hides a character."""

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        # given, it names a tenant: an empty one would quietly make the key a plain one
        if not value:
            raise ValueError("tenant: give a name, or leave `tenant` out for a key of its own")
        # shown in usage reports like a name: no control characters, no bidi overrides
        if not value.isprintable() or value != value.strip():
            raise ValueError("tenant: printable characters without leading or trailing spaces")
        return value


class KeyLimits(Strict):
    """How many runs each API key (each tenant, for tenant keys; every caller together on a
    server without keys) may have going at once and start per minute, counted per server
    process (runs queued for `fim worker` are held to `max_parallel_runs` across all
    workers, by the queue's lanes). Over a limit, a run is refused before it starts: 429
    with `Retry-After` over HTTP, a failed call or task over MCP and A2A."""

    max_parallel_runs: int | None = Field(default=None, ge=1)
    """Runs going at once (streamed, in the background in this process, MCP and A2A calls,
    workflow runs); the runs a run starts itself count as part of it."""
    runs_per_minute: int | None = Field(default=None, ge=1)
    """Runs started in any 60 seconds (a moving window)."""
    max_paused_runs: int | None = Field(default=None, ge=1)
    """Workflow runs paused at a human node at once (each keeps its record and inputs in
    the state store until decided or expired); unset: 100, or 10 per `max_parallel_runs`
    when that is fewer; `null`: no cap. Past it a new workflow run is a 429."""


class ServerSettings(Strict):
    host: str = "127.0.0.1"
    """Address `fim serve` listens on; one past loopback needs `api_keys` (or `allow_open`)."""
    port: int = 8000
    """Port `fim serve` listens on (`--port` overrides it)."""
    api_keys: list[str | TenantKey] = Field(default_factory=empty_list)
    """Bearer keys accepted by every route but /healthz; empty ones are ignored. Each key
    (or each tenant's keys, `{key: ..., tenant: ...}`) sees only the sessions, runs and
    approvals of the runs it started."""
    operator_keys: list[str] = Field(default_factory=empty_list)
    """Bearer keys accepted like `api_keys` that see every run and decide every approval
    (an operations console; `fim approvals` on the store needs no key)."""

    @field_validator("api_keys")
    @classmethod
    def _names_unique(cls, keys: list[str | TenantKey]) -> list[str | TenantKey]:
        # a name stands for one key in usage reports: two keys of one name read as one
        names = [k.name for k in keys if isinstance(k, TenantKey) and k.name is not None]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"api_keys: the name {twice[0]!r} is given to two keys")
        return keys

    cors_origins: list[str] = Field(default_factory=empty_list)
    """Web origins (besides the server's own) whose pages may call a server without keys."""
    max_body_bytes: int = 1_048_576
    """Largest request body accepted, chunked or not (413 past it)."""
    key_budget: Budget | None = None
    """What each API key (each tenant, for tenant keys) may spend, counted over its own runs
    only: per run, per UTC day, per session. One tenant cannot spend the others' share of a
    project budget; runs without a key (`fim run`, `fim eval`) have no key budget."""
    key_limits: KeyLimits | None = None
    """Runs each API key (each tenant) may have going at once and start per minute."""
    allow_open: bool = False
    """Serve without keys on an address other than loopback (a proxy in front
    authenticates). Off: `fim serve` refuses to, since anyone who reaches it could run
    every agent and workflow and decide every approval."""
    allowed_hosts: list[str] = Field(default_factory=empty_list)
    """Names (`fim.example.com`, or with a port) a server without keys answers besides
    loopback ones: those the proxy in front forwards as `Host`. Any other is refused (403),
    as a site re-pointing its own name at the server (DNS rebinding) would send; `*`: any."""
    shutdown_timeout: float = Field(default=30, ge=0, le=86_400)
    """Seconds a stopping `fim serve` (SIGTERM) lets the runs in flight finish; a run still
    going after that is cut and answered 503 `server_shutting_down` (clients retry).
    `fim serve --shutdown-timeout` overrides it; keep the orchestrator's grace period longer
    (Kubernetes: `terminationGracePeriodSeconds`)."""
    trusted_proxies: list[str] | None = None
    """Addresses or networks (`10.0.0.0/8`, `*`: any) whose `X-Forwarded-For` and
    `X-Forwarded-Proto` are believed (uvicorn's `forwarded_allow_ips`): the client address
    of the access log, the scheme of URLs. Unset: uvicorn's `FORWARDED_ALLOW_IPS` variable,
    else `127.0.0.1` (a sidecar proxy). `--forwarded-allow-ips` overrides it."""
    root_path: str = ""
    """The path prefix the proxy in front serves fim under (`/fim` for
    `https://ops.example.com/fim/`): the 202 `Location` of background runs and the
    development page's requests carry it. Requests may arrive with the prefix stripped or
    not. `--root-path` overrides it."""

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str] | None) -> list[str] | None:
        """A typo in an address would otherwise trust nobody, or (uvicorn reads what it
        cannot parse as a literal host) the wrong peer, without a word."""
        return None if value is None else [trusted_network(item) for item in value]

    @field_validator("root_path")
    @classmethod
    def _prefix(cls, value: str) -> str:
        return root_prefix(value)


def trusted_network(value: str) -> str:
    """One `trusted_proxies` entry as uvicorn takes it: `*`, an address or a network."""
    value = value.strip()
    if value == "*":
        return value
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError(
            f"{value!r} is not an IP address or network (e.g. 10.0.0.5, 10.0.0.0/8, or *)"
        ) from None
    return value


def root_prefix(value: str) -> str:
    """A path prefix as `/a/b`: one leading slash, none at the end, `""` for none."""
    value = value.strip().rstrip("/")
    if not value:
        return ""
    if not value.startswith("/") or any(c in value for c in "?#\\ ") or "//" in value:
        raise ValueError(f"{value!r} is not a path prefix (write it as /fim or /team/fim)")
    return value
