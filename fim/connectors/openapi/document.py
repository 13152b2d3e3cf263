"""The OpenAPI document in, the connector YAML out, and the shape checks on its parts.

Speed matters: GitHub's spec is 13 MB. JSON is parsed by `json`, YAML by fim's own reader
(`fim.config.yamlio`: libyaml's C parser, with the guards every project file gets) and the
declaration is written by libyaml's emitter; positions are only computed for the error
message of a document that fails. Every failure is one `OpenApiError` line per problem.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from fim.config.yamlio import DUPLICATE_KEY, YamlSyntaxError, parse

METHODS = ("get", "post", "put", "patch", "delete", "head")

_TOO_DEEP_TO_READ = (
    "nesting too deep: lists and mappings deeper than the parser reads (flatten them)"
)


class OpenApiError(ValueError):
    """The document cannot be imported; the message says why and what to do."""


def load_document(path: Path, warnings: list[str] | None = None) -> dict[str, Any]:
    """Read an OpenAPI document: JSON with `json`, YAML with `fim.config.yamlio` (both parse
    in C). `warnings` gets what is wrong but importable (a duplicate key).

    Every failure is an `OpenApiError`: one line, with the position when the parser knows
    it (a YAML document's problems all at once, a line each).
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise OpenApiError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise OpenApiError(
            f"{path} is not a text file (not UTF-8); expected an OpenAPI document in JSON or YAML"
        ) from None
    if "\x00" in text:
        raise OpenApiError(f"{path} is a binary file; expected an OpenAPI document")
    if text.lstrip().startswith(("{", "[")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OpenApiError(
                f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}"
            ) from None
        except RecursionError:  # `json` parses in C but counts its levels against Python's
            raise OpenApiError(f"{path}: {_TOO_DEEP_TO_READ}") from None
    else:
        data = _load_yaml(path, text, warnings if warnings is not None else [])
    if not isinstance(data, dict):
        raise OpenApiError(f"{path} is not an OpenAPI document (expected a mapping)")
    return data


def _load_yaml(path: Path, text: str, warnings: list[str]) -> Any:
    """YAML as fim reads its own files (YAML 1.2 scalars, as JSON has: `on`, `yes` and dates
    stay text), with the guards a third party's file needs: PyYAML's loader expanded a
    614-byte nest of aliases to gigabytes, composed a 60 KB `[[[...` until libyaml's C
    stack overflowed (a segfault) and built a self-containing anchor into a cyclic value.

    A duplicate key is a warning (the first is kept; PyYAML kept the last silently); the
    other problems are errors.
    """
    try:
        doc = parse(text, str(path))
    except YamlSyntaxError as exc:
        message = exc.message.replace("YAML syntax error:", "invalid YAML:", 1)
        hint = f" ({exc.hint})" if exc.hint else ""
        raise OpenApiError(f"{path}:{exc.line}:{exc.column}: {message}{hint}") from None
    except RecursionError:  # the parse is depth-capped; only a caller deep in its own stack
        raise OpenApiError(f"{path}: {_TOO_DEEP_TO_READ}") from None
    errors = [p for p in doc.problems if not p.message.startswith(DUPLICATE_KEY)]
    if errors:
        raise OpenApiError("\n".join(str(p) for p in errors))
    warnings += [str(p) for p in doc.problems]
    return doc.data


_QUOTED = re.compile(r"'([^']+)'")


def locate(text: str, message: str) -> tuple[int, int] | None:
    """1-based (line, col) in the document `text` that an import error `message` is about,
    found in the text (the import walks plain data, without positions): the key of the path
    it names (`paths./todos: ...` -> the `/todos` key), then the first value it quotes at or
    after it (`$ref '#/components/schemas/Todo' points nowhere` -> that `$ref`). None when
    the message names nothing found."""
    start, found = 0, None
    if message.startswith("paths."):
        key = message[len("paths.") :].split(": ", 1)[0]
        for method in ("get", "post", "put", "patch", "delete", "head"):  # `paths./x.get`
            key = key.removesuffix(f".{method}")
        at = _key_offset(text, key)
        if at is not None:
            start = found = at
    for quoted in _QUOTED.findall(message.split(": ", 1)[-1]):
        at = text.find(quoted, start)
        if at >= 0:
            found = at
            break
    if found is None:
        return None
    line = text.count("\n", 0, found) + 1
    return line, found - (text.rfind("\n", 0, found) + 1) + 1


def _key_offset(text: str, key: str) -> int | None:
    """Offset of `key` written as a mapping key (`key:`, `"key":` or `'key':`)."""
    for form in (f"{key}:", f'"{key}":', f"'{key}':", f'"{key}" :'):
        at = text.find(form)
        if at >= 0:
            return at + (1 if form[0] in "\"'" else 0)
    return None


def kind(value: Any) -> str:
    return "nothing" if value is None else f"a {type(value).__name__}"


def as_list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise OpenApiError(f"{where} must be a list, not {kind(value)}")
    return value


def dump_yaml(decl: dict[str, Any], source: str) -> str:
    """YAML text of a declaration with a provenance comment (libyaml's emitter: a big
    spec's declaration is megabytes, which the pure-Python emitter takes seconds over)."""
    # deferred: loading yaml costs tens of ms
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    text = yaml.dump(
        json.loads(json.dumps(decl)),
        Dumper=dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )
    source = re.sub(r"[\x00-\x1f\x7f]", "?", source)  # a newline in a file name ends the comment
    return f"# Imported from {source} by `fim connector import`; review before merging.\n{text}"


def summary(decl: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for action in decl["actions"].values():
        counts[action["access"]] = counts.get(action["access"], 0) + 1
    parts = ", ".join(f"{n} {a}" for a, n in sorted(counts.items()))
    count = len(decl["actions"])
    return f"{count} action{'' if count == 1 else 's'} ({parts})"
