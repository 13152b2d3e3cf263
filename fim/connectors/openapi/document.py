"""The OpenAPI document in, the connector YAML out, and the shape checks on its parts.

Speed matters: GitHub's spec is 13 MB. JSON is parsed by `json`, YAML by libyaml (pyyaml's
CSafeLoader) and the declaration is written by libyaml's emitter; positions are only computed
for the error message of a document that fails. Every failure is one `OpenApiError` line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

METHODS = ("get", "post", "put", "patch", "delete", "head")


class OpenApiError(ValueError):
    """The document cannot be imported; the message says why and what to do."""


def load_document(path: Path) -> dict[str, Any]:
    """Read an OpenAPI document: JSON with `json`, YAML with libyaml (both C-speed).

    Every failure is one `OpenApiError` line with the position when the parser knows it.
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
    else:
        data = _load_yaml(path, text)
    if not isinstance(data, dict):
        raise OpenApiError(f"{path} is not an OpenAPI document (expected a mapping)")
    return data


def _load_yaml(path: Path, text: str) -> Any:
    # deferred: loading yaml costs tens of ms
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # a safe loader: plain data only
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise OpenApiError(f"{where}: invalid YAML: {exc.problem or exc.context}") from None
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise OpenApiError(f"{path}: invalid YAML: {str(exc).splitlines()[0]}") from None


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
    return f"# Imported from {source} by `fim connector import`; review before merging.\n{text}"


def summary(decl: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for action in decl["actions"].values():
        counts[action["access"]] = counts.get(action["access"], 0) + 1
    parts = ", ".join(f"{n} {a}" for a, n in sorted(counts.items()))
    return f"{len(decl['actions'])} actions ({parts})"
