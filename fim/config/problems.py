"""Turn pydantic validation errors into `path:line:col: message (hint)` problems.

Pydantic reports a `loc` such as `('nodes', 'lookup', 'connector', 'action')` where some
elements are union tags (`connector` is the node type here, not a key). We walk the loc
alongside the model's type structure, so we know which elements are keys of the user's
data, which model a key belonged to (for did-you-mean), and where in the file it is.

A problem quotes the value it got, and a value can be a secret: `timeout: ${API_KEY}`, two
variable names swapped. So a value that `${VAR}` interpolation gave is shown as `***`,
followed by where it came from as written (`got '***' (the value of ${API_KEY})`): the
variable's name is what the user needs to fix it, and no part of the secret is shown. Any
other value is masked before it is quoted and cut (`_Quoter.show`), with the document's
literal credentials and every secret the process knows: cut first, a secret kept a piece
no mask matched, and quoted first, a quote in it was escaped (`\\'`).
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from fim.config.claude_hooks import pasted_claude_hooks
from fim.config.suggestions import suggest as suggest
from fim.config.yamlio import Document, Path_
from fim.errors import Problem
from fim.masking import MASK, Masker, config_secrets, known

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

_TYPE_WORDS = {
    "string_type": "expected a string",
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "list_type": "expected a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
}


def _unwrap(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _discriminator(tp: Any) -> str | None:
    """The discriminator of an `Annotated[Union, Field(discriminator=...)]`, if any."""
    while typing.get_origin(tp) is typing.Annotated:
        for meta in typing.get_args(tp)[1:]:
            if isinstance(getattr(meta, "discriminator", None), str):
                return meta.discriminator
        tp = typing.get_args(tp)[0]
    return None


def union_tags(tp: Any) -> list[str]:
    """Tags of a discriminated union: the Literal values of each member's discriminator."""
    field = _discriminator(tp)
    tags: list[str] = []
    for m in typing.get_args(_unwrap(tp)):
        info = getattr(m, "model_fields", {}).get(field or "")
        if info is not None and typing.get_origin(info.annotation) is typing.Literal:
            tags.extend(str(v) for v in typing.get_args(info.annotation))
    return tags


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _model_field_type(model: type[BaseModel], key: Any) -> tuple[bool, Any]:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return True, info.annotation
    return False, None


def _union_member(members: list[Any], tag: Any) -> Any:
    for m in members:
        m = _unwrap(m)
        if isinstance(m, type) and issubclass(m, BaseModel):
            if m.__name__ == tag:
                return m
            for info in m.model_fields.values():
                ann = info.annotation
                if typing.get_origin(ann) is typing.Literal and tag in typing.get_args(ann):
                    return m
        elif (isinstance(m, type) and m.__name__ == tag) or (
            typing.get_origin(m) is not None
            and str(tag).startswith(getattr(typing.get_origin(m), "__name__", "?"))
        ):
            return m
    return None


def resolve_loc(root: Any, loc: tuple[Any, ...]) -> tuple[Path_, Any, bool]:
    """Walk `loc` -> (path of keys/indices in the data, the type there, and whether it
    went through a non-discriminated union, whose other branches' errors are noise)."""
    tp: Any = root
    path: list[Any] = []
    skipped = False
    i = 0
    while i < len(loc):
        step = loc[i]
        tagged = _discriminator(tp) is not None
        tp = _unwrap(tp)
        if _is_union(tp):
            members = [m for m in typing.get_args(tp) if m is not type(None)]
            if len(members) == 1:
                tp = members[0]
                continue
            tp = _union_member(members, step)
            skipped = skipped or not tagged
            i += 1
            continue
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            found, tp = _model_field_type(tp, step)
            if not found:
                tp = None
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1] if typing.get_args(tp) else None
        elif typing.get_origin(tp) is list:
            tp = typing.get_args(tp)[0] if typing.get_args(tp) else None
        else:
            tp = None
        path.append(step)
        i += 1
    return tuple(path), tp, skipped


def _field_names(model: Any) -> list[str]:
    model = _unwrap(model)
    if _is_union(model):  # `Budget | None`: the keys of the model that may be there
        members = [m for m in typing.get_args(model) if m is not type(None)]
        model = _unwrap(members[0]) if len(members) == 1 else None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return []
    return [info.alias or name for name, info in model.model_fields.items()]


class _Quoter:
    """Quotes the values a document's problems got (`show`): masked with the document's
    literal credentials (a masker made once, and only if a problem quotes a value) and with
    every secret the process knows (`known()`, at a reload the running snapshot's)."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self._masker: Masker | None = None

    def mask(self, value: Any) -> Any:
        if self._masker is None:
            self._masker = Masker(config_secrets(self.doc.data))
        return known().value(self._masker.value(value))

    def show(self, value: Any, path: Path_) -> str:
        """`value`, found at `path`, quoted for a message in at most 60 characters: what
        interpolation gave as `***` and the text it came from, the rest masked, then quoted,
        then cut."""
        sources: list[str] = []
        masked = self.mask(_from_environment(self.doc, value, _node_at(self.doc, path), sources))
        text = _cut(repr(masked))
        if sources:
            named = ", ".join(_cut(self.mask(source)) for source in dict.fromkeys(sources))
            text += f" (the value of {named})"
        return text


def _cut(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def _node_at(doc: Document, path: Path_) -> Any:
    """The YAML node at `path` of `doc`, or None (a value a default filled in)."""
    node = doc.node
    for step in path:
        if node is None:
            return None
        if node.id == "mapping":
            pair = doc._find_pair(node, step)
            node = pair[1] if pair is not None else None
        elif node.id == "sequence" and isinstance(step, int) and 0 <= step < len(node.value):
            node = node.value[step]
        else:
            return None
    return node


def _from_environment(doc: Document, value: Any, node: Any, sources: list[str]) -> Any:
    """`value` with each string that `${VAR}` interpolation changed replaced by `***`, and
    the text each came from in the file (`node`, the value's YAML node) added to `sources`."""
    if node is None:
        return value
    if isinstance(value, str):
        written = node.value if node.id == "scalar" else None
        if isinstance(written, str) and "${" in written and written != value:
            sources.append(written)
            return MASK
        return value
    if isinstance(value, dict) and node.id == "mapping":
        shown: dict[Any, Any] = {}
        for key, item in value.items():
            pair = doc._find_pair(node, key)
            shown[key] = _from_environment(doc, item, pair[1] if pair else None, sources)
        return shown
    if isinstance(value, list) and node.id == "sequence" and len(node.value) == len(value):
        return [
            _from_environment(doc, item, each, sources)
            for item, each in zip(value, node.value, strict=True)
        ]
    return value


def validation_problems(exc: ValidationError, root: Any, doc: Document) -> list[Problem]:
    """Map every error of `exc` (validating `doc.data` as `root`) to a Problem."""
    quote = _Quoter(doc)
    collected: list[tuple[Path_, bool, Problem]] = []
    errors = exc.errors(include_url=False)
    extra = {tuple(e["loc"]) for e in errors if e["type"] == "extra_forbidden"}
    for err in errors:
        loc, kind = tuple(err["loc"]), err["type"]
        if kind == "missing":
            parent, _, skipped = resolve_loc(root, loc[:-1])
            label = ".".join(str(p) for p in parent)
            problem = doc.problem(
                parent,
                f"{label + ': ' if label else ''}missing required field '{loc[-1]}'",
                _misspelt(str(loc[-1]), err["input"], loc[:-1], extra),
            )
            path = (*parent, loc[-1])
        elif kind == "extra_forbidden":
            parent, model, skipped = resolve_loc(root, loc[:-1])
            path = (*parent, loc[-1])
            problem = doc.problem(
                path,
                f"unknown key '{loc[-1]}'",
                _key_hint(model, str(loc[-1]), err["input"])
                or suggest(str(loc[-1]), _field_names(model), "keys"),
                key=True,
            )
        elif kind in ("union_tag_invalid", "union_tag_not_found"):
            path, tp, skipped = resolve_loc(root, loc)
            problem = _tag_problem(doc, path, err, union_tags(tp), quote)
        else:
            path, tp, skipped = resolve_loc(root, loc)
            label = ".".join(str(p) for p in path)
            typo = _key_typo(err["input"], tp)
            if typo is not None:  # `{comand: npx}`: the misspelt key is why no shape fits
                key, hint = typo
                problem = doc.problem((*path, key), f"unknown key '{key}'", hint, key=True)
                collected.append(((*path, key), skipped, problem))
                continue
            said = _message(err, path, quote)
            message = f"{label}: {said}" if label else said
            problem = doc.problem(path, message, _hint(err))
            claude = pasted_claude_hooks(err, path, label)
            if claude is not None:
                problem = doc.problem(path, *claude)
        collected.append((path, skipped, problem))
    return _prune(collected)


def _key_hint(model: Any, key: str, value: Any) -> str | None:
    """The hint a model gives for a key it does not have (`unknown_key_hint`): the word
    another tool uses there, and this model's for it (promptfoo's `assert:` in an eval
    case is fim's `expect:`)."""
    model = _unwrap(model)
    if _is_union(model):  # `Negatable | None`
        members = [m for m in typing.get_args(model) if m is not type(None)]
        model = _unwrap(members[0]) if len(members) == 1 else None
    hint = getattr(model, "unknown_key_hint", None)
    return hint(key, value) if callable(hint) else None


def _misspelt(
    name: str, given: Any, parent: tuple[Any, ...], extra: set[tuple[Any, ...]]
) -> str | None:
    """`the file has 'descripton': did you mean 'description'?` when a key of the mapping
    that lacks required `name` is a misspelling of it, and no "unknown key" problem says so
    already (a model that takes any key, as a skill's front matter does)."""
    if not isinstance(given, dict):
        return None
    keys = [str(k) for k in given if isinstance(k, str) and (*parent, k) not in extra]
    close = difflib.get_close_matches(name, keys, n=1, cutoff=0.75)
    return f"the file has '{close[0]}': did you mean '{name}'?" if close else None


def _key_typo(given: Any, tp: Any) -> tuple[str, str] | None:
    """A key of `given` that no member of the union `tp` has and that is a misspelling of
    a key one has: (key, did-you-mean). None for anything else."""
    if not isinstance(given, dict):
        return None
    tp = _unwrap(tp)
    if not _is_union(tp):
        return None
    fields = {name for member in typing.get_args(tp) for name in _field_names(member)}
    if not fields:
        return None
    for key in given:
        if isinstance(key, str) and key not in fields and key != "type":
            close = difflib.get_close_matches(key, sorted(fields), n=1, cutoff=0.75)
            if close:
                return key, f"did you mean '{close[0]}'?"
    return None


def _message(err: ErrorDetails, path: Path_, quote: _Quoter) -> str:
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind in _TYPE_WORDS:
        return f"{_TYPE_WORDS[kind]}, got {quote.show(err['input'], path)}"
    if kind == "literal_error":
        expected = ctx.get("expected", "")
        return f"expected one of {expected}, got {quote.show(err['input'], path)}"
    msg = err["msg"]
    return msg.removeprefix("Value error, ")


def _hint(err: ErrorDetails) -> str | None:
    kind, ctx = err["type"], err.get("ctx") or {}
    if isinstance(ctx.get("hint"), str):  # a validator's own (a `PydanticCustomError`)
        return str(ctx["hint"])
    if kind == "literal_error" and isinstance(err["input"], str):
        options = [
            o.strip().strip("'")
            for o in str(ctx.get("expected", "")).replace(" or ", ", ").split(",")
        ]
        return suggest(err["input"], options) if options else None
    if kind == "less_than_equal" and ctx.get("le") == 1 and _percent(err["input"]):
        return "a fraction: 1.0 is 100%"  # `threshold: 100`, a pass rate written in percent
    return None


def _percent(value: Any) -> bool:
    """Whether a number over a fraction's bound of 1 reads as a percentage (90, 100)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 1 < value <= 100


def _tag_problem(
    doc: Document, path: Path_, err: ErrorDetails, tags: list[str], quote: _Quoter
) -> Problem:
    """`type: foo` / `kind: ftp` / no type at all, on a discriminated union."""
    ctx = err.get("ctx") or {}
    field = str(ctx.get("discriminator", "type")).strip("'")
    where = ".".join(str(p) for p in path)
    choices = ", ".join(tags)
    if err["type"] == "union_tag_invalid":
        tag = str(ctx.get("tag", ""))
        return doc.problem(
            (*path, field),
            f"{where}: unknown {field} {quote.show(tag, (*path, field))}",
            suggest(tag, tags, f"{field}s") if tags else None,
        )
    return doc.problem(
        path,
        f"{where + ': ' if where else ''}missing '{field}'",
        f"set {field} to one of: {choices}" if choices else None,
    )


def _prune(collected: list[tuple[Path_, bool, Problem]]) -> list[Problem]:
    """Drop union-branch noise: a branch that failed on the whole value is dropped when
    another branch got further, and same-place messages of different branches merge."""
    keep: list[tuple[Path_, bool, Problem]] = []
    for path, skipped, problem in collected:
        if skipped and any(
            other[: len(path)] == path and len(other) > len(path) for other, _, _ in collected
        ):
            continue
        keep.append((path, skipped, problem))
    out: list[Problem] = []
    branches: dict[Path_, int] = {}
    for path, skipped, problem in keep:
        if not skipped:
            out.append(problem)
        elif path in branches:
            first = out[branches[path]]
            second = problem.message.split(": ", 1)[-1]
            if second not in first.message:
                out[branches[path]] = Problem(
                    first.path,
                    first.line,
                    first.column,
                    f"{first.message}, or {second}",
                    first.hint,
                )
        else:
            branches[path] = len(out)
            out.append(problem)
    return out
