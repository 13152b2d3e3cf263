"""`${VAR}` / `${VAR:-default}` / `${VAR:?message}` / `${file:/path}` interpolation of every
string value of a document.

A secret may come from a file (a Kubernetes Secret volume, a Docker secret): `${file:/path}`
is the file's text without its trailing line breaks (`\n`, `\r\n`, `\r`, however many) or a
leading UTF-8 byte order mark, and a bare `${VAR}` whose variable is unset reads the file
`VAR_FILE` names (Docker's convention). Either is read at each load (start and every
reload), so a rotated file is read by the next one; a file that is missing or unreadable is
an unset variable, its problem naming the file, never its content.

Values that came from the environment are remembered as secrets, so the Snapshot can mask
them wherever text leaves fim; so is a value's core without surrounding whitespace, which is
what a program given it (an HTTP client, an SDK) uses and may print (attack-62 F2).
Defaults are written in git and are therefore not secret.
The values a command hook's `env: [NAME]` list passes through by name are secrets too
(`passed_through`): read from the same environment, they are secrets on the same terms.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Mapping
from typing import Any

from fim.config.child_env import network_env
from fim.config.serving import SERVE_ONLY
from fim.config.yamlio import Document, Path_
from fim.errors import Problem
from fim.masking.forms import MIN_SECRET
from fim.masking.keys import secret_key

REFERENCE = re.compile(r"\$(\$?)\{([^}]*)\}")
RUNTIME_VARS = frozenset({"CLAUDE_PROJECT_DIR", "CLAUDE_ENV_FILE", "FIM_PROJECT_DIR"})
"""Set by fim for each hook process; in a hook's `command` the shell expands them then."""
HOOK_BASE_ENV = frozenset(
    {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM", "USER", "SHELL"}
)
"""What every command hook process gets from fim's environment, declared or not (`LC_*`
too; `fim.hooks.command_input`), with the CA bundle and proxy variables of
`fim.config.child_env` (a proxy URL only without credentials). Listing one under `env:`
passes nothing more, so its value is not made a secret: masking `/root` or `en_US.UTF-8`
would only deface ordinary text."""
URL_KEYS = frozenset({"base_url"})
"""Keys whose value is a URL every request is sent to: an empty default there is no URL
(an HTTP connector's `base_url: ${API_URL:-}` failed every call), so a hint offers a local
address instead (`while_developing`)."""
DEV_URL = "http://127.0.0.1:8080"


def while_developing(name: str, url: bool) -> str:
    """The `${NAME:-...}` a hint offers for developing without NAME: a local address for a
    URL, else empty (a token left out)."""
    return f"${{{name}:-{DEV_URL if url else ''}}}"


_SECRET_WORDS = frozenset({"KEY", "KEYS", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "PWD"})
"""Words of a variable's name that make its value a credential (`OPEN_METEO_API_KEY`)."""


def secret_position(path: Path_, name: str) -> bool:
    """Whether `${name}` at `path` holds a credential: under a credential key (`auth:`,
    `token:`, `api_key:`, `Authorization`; `fim.masking.keys.secret_key`), or a variable
    named like one (`..._KEY`, `..._TOKEN`, `..._SECRET`, `..._PASSWORD`). Its hint never
    offers a default: a value written there is a secret committed to git."""
    if any(secret_key(key, declaration=True) for key in path):
        return True
    return secret_key(name) or not _SECRET_WORDS.isdisjoint(name.upper().split("_"))


_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])(.*))?$", re.DOTALL)
FILE_PREFIX = "file:"
MAX_SECRET_FILE = 64 * 1024
"""The most a secret file may hold: a token or a key, not a document (a path mistaken for a
secret's, `/var/log/syslog`, is refused whole rather than sent as a credential)."""


def read_secret_file(path: str) -> tuple[str | None, str]:
    """(the text of the secret file at `path` without its trailing line breaks and a leading
    UTF-8 BOM, "") or (None, why it cannot be read). Never the content in the reason. A file
    that ends in a blank line (`tok\n\n`) gave `tok\n`, and the bare `tok` was never
    masked (attack-62 F2)."""
    if not os.path.isabs(path):
        return None, "not an absolute path"
    try:
        # non-blocking, then only a regular file (a link to one, as Kubernetes Secret volumes
        # are, is followed): a FIFO, /dev/tty or a directory would hang or fail the read, and
        # with it `fim validate` and every later reload (attack-61 F4)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return None, exc.strerror or type(exc).__name__
    except ValueError:  # a NUL in the path
        return None, "not a valid path"
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None, "not a regular file"
    with os.fdopen(fd, "rb") as file:
        try:
            raw = file.read(MAX_SECRET_FILE + 1)
        except OSError as exc:
            return None, exc.strerror or type(exc).__name__
    if len(raw) > MAX_SECRET_FILE:
        return None, f"larger than {MAX_SECRET_FILE // 1024} KiB, not a secret"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    return text.removeprefix("\ufeff").rstrip("\r\n"), ""


def file_fingerprint(env: Mapping[str, str]) -> tuple[tuple[str, int, int, int], ...]:
    """(name, inode, mtime, size) of each file a `*_FILE` variable names: part of the loader's
    cache key, so a rotated secret file is read again though the environment is the same."""
    found = []
    for name, value in sorted(env.items()):
        if name.endswith("_FILE") and value:
            try:
                st = os.stat(value)
            except (OSError, ValueError):
                continue
            found.append((name, st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(found)


def interpolate(doc: Document, secrets: set[str], env: Mapping[str, str] | None = None) -> None:
    """Replace variables in every string value of `doc.data` in place.

    `${VAR:-x}` uses x when VAR is unset or empty, `${VAR-x}` only when unset, and `$${...}`
    is a literal `${...}`. A missing variable without default becomes "" (never a default
    the user did not write) and a problem at its string in `doc.unset`: the loader decides
    whether it breaks the project, only the connector that holds it, or only the commands
    that read its group: `state:`/`server:` `fim serve` and `fim worker`, a model's settings
    the commands that call models (`fim.config.serving`).

    `${VAR:?message}` (docker compose's syntax) is a required variable that says why: unset
    or empty, it is missing like a bare `${VAR}`, with `message` in its problem and no
    "give a default" hint (the author chose to have none); `${VAR?message}` accepts empty.

    `${file:/path}` is the file's text (trailing line breaks off), a bare `${VAR}` with VAR
    unset reads the file `VAR_FILE` names; what a file gives is a secret like a variable's.
    """
    environ = os.environ if env is None else env
    doc.data = _walk(doc, doc.data, (), secrets, environ)


def _walk(doc: Document, value: Any, path: Path_, secrets: set[str], env: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return _substitute(doc, value, path, secrets, env) if "${" in value else value
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (str, dict, list)):
                value[k] = _walk(doc, v, (*path, k), secrets, env)
        return value
    if isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, (str, dict, list)):
                value[i] = _walk(doc, v, (*path, i), secrets, env)
    return value


def _substitute(
    doc: Document, text: str, path: Path_, secrets: set[str], env: Mapping[str, str]
) -> str:
    def replace(match: re.Match[str]) -> str:
        escaped, inner = match.group(1), match.group(2)
        if escaped:
            return "${" + inner + "}"
        if inner.startswith(FILE_PREFIX):
            return _from_file(doc, inner[len(FILE_PREFIX) :].strip(), path, secrets)
        parsed = _NAME.match(inner.strip())
        if parsed is None:
            doc.problems.append(
                doc.problem(
                    path,
                    f"invalid variable reference '${{{inner}}}'",
                    "use ${NAME}, ${NAME:-default} or ${NAME:?message};"
                    " write $${...} for a literal",
                )
            )
            return match.group(0)
        name, op, default = parsed.groups()
        if name in RUNTIME_VARS and path and path[-1] == "command":
            return match.group(0)
        value = env.get(name)
        named = env.get(f"{name}_FILE") if value is None and op is None else None
        if named:  # Docker's convention: the secret is in the file VAR_FILE names
            value, why = read_secret_file(named)
            if value is None:
                missing = f"environment variable '{name}' is not set and {name}_FILE names"
                doc.unset.append((path, _unreadable(doc, path, named, why, missing)))
                return ""
        if value is not None and (value != "" or op not in (":-", ":?")):
            add_secret(secrets, value)
            return value
        if op in ("-", ":-"):
            return default
        doc.unset.append((path, _missing(doc, path, name, op, default, empty=value == "")))
        return ""

    return REFERENCE.sub(replace, text)


def _from_file(doc: Document, file: str, path: Path_, secrets: set[str]) -> str:
    """`${file:/path}`: the file's text, a secret; unreadable, "" and an unset problem."""
    value, why = read_secret_file(file)
    if value is None:
        doc.unset.append((path, _unreadable(doc, path, file, why, "secret file")))
        return ""
    add_secret(secrets, value)
    return value


def add_secret(secrets: set[str], value: str) -> None:
    """Record `value` as a secret, and its core without surrounding whitespace or a BOM
    when that differs and is still long enough to mask (`fim.masking.forms.MIN_SECRET`)."""
    if not value:
        return
    secrets.add(value)
    core = value.strip().strip("\ufeff").strip()
    if core != value and len(core) >= MIN_SECRET:
        secrets.add(core)


def _unreadable(doc: Document, path: Path_, file: str, why: str, what: str) -> Problem:
    """The problem of a secret file that cannot be read: named, never its content."""
    return doc.problem(
        path,
        f"{what} '{file}', which cannot be read ({why})",
        "mount the secret there (a Kubernetes Secret volume, a Docker secret) and make it "
        "readable by fim's user",
    )


def _missing(
    doc: Document, path: Path_, name: str, op: str | None, message: str | None, empty: bool
) -> Problem:
    """The problem of a required variable that is not there: `${VAR}`'s hint offers a
    default (an empty one for a credential, `secret_position`), `${VAR:?message}`'s names
    the author's message and never a default."""
    if op is None:
        hint = f"export {name}=... or give a default: ${{{name}:-value}}"
        if secret_position(path, name):  # a default is a secret committed to git
            hint = (
                f"export {name}=..., or write {while_developing(name, url=False)} while "
                "developing; never a value there: it would be a secret in git"
            )
        if path and path[-1] in URL_KEYS:
            hint = f"export {name}=... or give a default: {while_developing(name, url=True)}"
        if doc.path == "fim.yaml" and path and path[0] in SERVE_ONLY:
            # a default there is what a pod whose secret lacks the variable would run on
            hint = f"export {name}=... where fim serves; ${{{name}:?why}} says why it is needed"
        return doc.problem(path, f"environment variable '{name}' is not set", hint)
    said = "is empty" if empty else "is not set"
    why = (message or "").strip()
    text = f"environment variable '{name}' {said}" + (f": {why}" if why else "")
    return doc.problem(path, text, f"export {name}=...")


def escaped(text: str) -> str:
    """`text` written so that interpolation reads it back unchanged: each `${...}` (or
    `$${...}`) it would expand gets one more `$`, which it takes off again (text copied
    from outside, such as an imported spec, is never a variable)."""
    return REFERENCE.sub(lambda m: "$" + m.group(0), text) if "${" in text else text


def base_env(name: str) -> bool:
    """Whether fim hands `name` to every hook process anyway (`HOOK_BASE_ENV`, `LC_*`)."""
    return name in HOOK_BASE_ENV or name.startswith("LC_")


def passed_anyway(name: str, value: str) -> bool:
    """Whether a hook gets `name` with this value undeclared: `base_env`, a CA bundle, a
    proxy URL without credentials (`fim.config.child_env.network_env`)."""
    return base_env(name) or name in network_env({name: value})[0]


def passed_through(
    names: Iterable[str], secrets: set[str], env: Mapping[str, str] | None = None
) -> None:
    """Record as secrets the values of the variables a hook's `env:` list passes through
    from fim's environment (`env: [GH_TOKEN]`).

    They come from where `${GH_TOKEN}` would, so they are secrets on the same terms; left
    out, whatever the hook prints about them (a block reason on exit 2, a `systemMessage`)
    went out raw to the CLI, HTTP responses, the state store, spans and the model. Recorded
    when the project loads, so the Snapshot's masker knows them, not only `known()`.
    """
    environ = os.environ if env is None else env
    for name in names:
        value = environ.get(name)
        if value and not passed_anyway(name, value):
            add_secret(secrets, value)
