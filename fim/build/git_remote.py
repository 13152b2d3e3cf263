"""A `--git` remote's URL as fim shows it, and the credentials in it as secrets.

`https://x-access-token:TOKEN@github.com/org/agents.git` is how CI and Kubernetes most
often hand git a token. git strips the user information from its own messages; fim must
not add it back. So every message, log line and `/v1/status` problem names the remote as
`shown_url` gives it (`https://***@github.com/org/agents.git`), and the user information
is registered with the one masking policy (`fim.masking.remember`), so any exit that quotes
it anyway (git's own words, a traceback) masks it, as it masks the state store's password.

What counts as a credential: the password of the user information (raw and URL-decoded),
and, for http(s), a user name given alone (`https://TOKEN@host/...`: GitHub, GitLab and
Bitbucket take a token there). An ssh user name given alone (`ssh://git@host/...`) is not
a credential (ssh authenticates by key) and is shown as it is.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from fim.config.child_env import NETWORK_ENV
from fim.config.interpolate import base_env
from fim.errors import ConfigError, Problem, RunError
from fim.masking import known, masked_url, remember

WHERE = "<git remote>"
"""The location of a problem that is the remote's, not a file's (`path` of a Problem):
an unreachable remote, a missing ref, a failed clone."""

_TOKEN_SCHEMES = ("http", "https")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def is_commit(text: str) -> bool:
    """Whether `text` is a full commit id as git prints it (40 or 64 lowercase hex digits,
    nothing around them). Only such a value is handed to git as a revision: a value read
    from the state store may be anything, `--upload-pack=...` included (attack-61 F1)."""
    return _COMMIT.fullmatch(text) is not None


def _userinfo(url: str) -> tuple[str, str, str] | None:
    """(scheme, user, password) of a URL with user information, else None."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if not parts.scheme or "@" not in parts.netloc:
        return None
    info = parts.netloc.rpartition("@")[0]
    user, _, password = info.partition(":")
    return parts.scheme.lower(), user, password


def url_secrets(url: str) -> set[str]:
    """The credentials written into `url` (see the module docstring), raw and decoded."""
    found = _userinfo(url)
    if found is None:
        return set()
    scheme, user, password = found
    secret = password or (user if scheme in _TOKEN_SCHEMES else "")
    if not secret:
        return set()
    whole = f"{user}:{password}" if password else user
    return {s for s in (secret, unquote(secret), whole, unquote(whole)) if s}


def shown_url(url: str) -> str:
    """`url` fit for a message: user information that holds a credential becomes `***`
    (`https://***@host/org/agents.git`), and a credential-looking query value too."""
    found = _userinfo(url)
    if found is None or not url_secrets(url):
        return masked_url(url)
    head, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    host = netloc.rpartition("@")[2]
    return masked_url(f"{head}{sep}***@{host}{slash}{path}")


def register(url: str) -> None:
    """Make every exit of this process mask the credentials in `url`."""
    remember(url_secrets(url))


def rejected(problems: list[Problem], sha: str) -> list[Problem]:
    """`problems` of commit `sha`, each saying that commit was rejected."""
    return [
        dataclasses.replace(p, message=f"commit {sha[:12]} rejected: {p.message}") for p in problems
    ]


def rejected_by(exc: Exception, sha: str) -> list[Problem]:
    """Why commit `sha` was rejected: a compile's problems at their own files and lines, any
    other failure as `remote_problem` (never pinned on `fim.yaml:1:1`, attack-62 F3)."""
    if isinstance(exc, ConfigError):
        return rejected(exc.problems, sha)
    return [remote_problem(exc, f"commit {sha[:12]} rejected: ")]


def remote_problem(exc: Exception, prefix: str = "") -> Problem:
    """A failure of git (`RunError`: the remote, its ref, the checkout) as a problem at
    the remote's own location, not at a file of the project; any other error at fim.yaml.
    Its text is masked: git's own words may quote the remote's credentials."""
    where = WHERE if isinstance(exc, RunError) else "fim.yaml"
    return Problem(where, 1, 1, known().text(f"{prefix}{exc}"))


# --------------------------------------------------------------------------- options, env


def parse_interval(text: str) -> float:
    """`30s`, `2m`, `500ms`, `1h` or a bare number of seconds -> seconds (at least 1 s)."""
    match = _DURATION.match(text)
    if not match:
        raise RunError(f"invalid interval '{text}'", hint="use e.g. 30s, 2m, 1h")
    value = (
        float(match.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]
    )
    if value < 1:
        raise RunError(f"interval '{text}' is shorter than 1s", hint="poll at most once a second")
    return value


def default_checkout(url: str) -> Path:
    """Where the checkout of `url` lives unless --git-checkout says otherwise."""

    base = os.environ.get("FIM_GIT_CHECKOUTS") or Path.home() / ".cache" / "fim" / "git"
    return Path(base) / hashlib.sha256(url.encode()).hexdigest()[:16]


GIT_PREFIXES = ("GIT_", "SSH_", "XDG_", "GH_", "GITHUB_", "GITLAB_", "GCM_", "KRB5", "AWS_")
GIT_NAMES = NETWORK_ENV | {
    "DBUS_SESSION_BUS_ADDRESS",
    "CLOUDSDK_CONFIG",
    "LD_LIBRARY_PATH",
    "FIM_GIT_ENV",
}
"""The CA bundles and proxies hooks get (`fim.config.child_env`; git takes a proxy with
credentials too: fetching is fim's own work), and what git's helpers read."""


def git_env(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """What `git` gets of fim's environment: what a hook gets (PATH, HOME, LANG ...), git's
    and ssh's own variables, what credential helpers read (`GH_TOKEN`, Git Credential
    Manager's `GCM_*`, Kerberos, AWS CodeCommit's profile, the D-Bus session of libsecret),
    proxies and CA bundles, and the names `FIM_GIT_ENV` lists (comma-separated), not the
    model and connector keys: a short-lived `git` is dumpable, and a same-user process could
    read them from its `/proc/<pid>/environ` (attack-28)."""
    extra = {n.strip() for n in environ.get("FIM_GIT_ENV", "").split(",") if n.strip()}
    return {
        name: value
        for name, value in environ.items()
        if base_env(name) or name.startswith(GIT_PREFIXES) or name in GIT_NAMES or name in extra
    }


__all__ = [
    "WHERE",
    "default_checkout",
    "git_env",
    "is_commit",
    "parse_interval",
    "register",
    "rejected",
    "remote_problem",
    "shown_url",
    "url_secrets",
]
