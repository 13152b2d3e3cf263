"""MCP elicitation: a server asks the user a question in the middle of a tool call.

fim declares the capability and routes the question to the approvals queue (the same
store `confirm` hooks wait on), so it is answered with `fim approvals approve ID --content
JSON` (accept), `fim approvals deny ID` (decline), `... deny ID --cancel` (cancel), or over
HTTP (`POST /v1/approvals/{id}`). No answer within the server's `elicitation_timeout`
answers `cancel`.

Everything the server sends is hostile: the message is capped and masked, the schema must
be the flat, primitive subset the protocol allows (no `$ref`, no nesting) and small, and
the answer is validated against it before it is sent. The question is routed to the run
whose call is in flight; when no run or several runs' calls are in flight (so fim cannot
tell who is asked), or the run has no human behind it (evals, a non-interactive
`fim run`), fim declines: it fails closed and says so in an event.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from typing import TYPE_CHECKING, Any

from fim import schema_check
from fim.masking import mask_strings
from fim.mcp.caller import asking_run
from fim.store import get_store

if TYPE_CHECKING:
    from mcp.client.session import ElicitationFnT

    from fim.mcp.caller import Caller
    from fim.mcp.jobs import Requests

log = logging.getLogger(__name__)

KIND = "elicitation"
"""The approvals-store `kind` of an elicitation."""
MAX_MESSAGE = 2000
MAX_SCHEMA_BYTES = 16_000
MAX_PROPERTIES = 50
MAX_STRING = 10_000
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_TYPES = {"string", "number", "integer", "boolean", "array"}
_KEYS = {
    "type",
    "title",
    "description",
    "default",
    "enum",
    "enumNames",
    "oneOf",
    "anyOf",
    "items",
    "minLength",
    "maxLength",
    "format",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "const",
}
_FORMATS = {"email", "uri", "date", "date-time"}


# --------------------------------------------------------------------------- schemas


def schema_problem(schema: Any) -> str | None:
    """Why a requested schema is not the flat primitive object the protocol allows (or is
    too large), or None when it is fine to show and validate against."""
    if not isinstance(schema, dict):
        return "the requested schema is not an object"
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError):
        return "the requested schema is not JSON"
    if size > MAX_SCHEMA_BYTES:
        return f"the requested schema is larger than {MAX_SCHEMA_BYTES} bytes"
    if schema.get("type") != "object":
        return "the requested schema's type is not `object`"
    extra = set(schema) - {"type", "properties", "required", "title", "description", "$schema"}
    if extra:
        return f"the requested schema has unsupported keys: {', '.join(sorted(extra))[:200]}"
    props = schema.get("properties", {})
    if not isinstance(props, dict) or len(props) > MAX_PROPERTIES:
        return f"`properties` must be an object of at most {MAX_PROPERTIES} fields"
    for name, prop in props.items():
        if not _NAME.match(str(name)):
            return f"field name {str(name)[:64]!r} is not a plain name"
        problem = _property_problem(prop)
        if problem:
            return f"field '{name}': {problem}"
    required = schema.get("required", [])
    if not isinstance(required, list) or any(r not in props for r in required):
        return "`required` must list fields of `properties`"
    return None


def _property_problem(prop: Any) -> str | None:
    if not isinstance(prop, dict):
        return "not an object"
    unknown = set(prop) - _KEYS
    if unknown:
        return f"unsupported keys {', '.join(sorted(unknown))[:200]} (only flat primitives)"
    kind = prop.get("type")
    if kind not in _TYPES:
        return f"type {str(kind)[:40]!r} is not one of {', '.join(sorted(_TYPES))}"
    for key in ("minLength", "maxLength", "minItems", "maxItems"):
        if key in prop and (type(prop[key]) is not int or prop[key] < 0):
            return f"`{key}` must be a non-negative integer"
    for key in ("minimum", "maximum"):
        if key in prop and (isinstance(prop[key], bool) or not isinstance(prop[key], int | float)):
            return f"`{key}` must be a number"
    enum = prop.get("enum")
    if enum is not None and (
        not isinstance(enum, list)
        or not enum
        or len(enum) > 100
        or not all(isinstance(v, str | int | float | bool) for v in enum)
    ):
        return "`enum` must list up to 100 primitive values"
    if "format" in prop and prop["format"] not in _FORMATS:
        return f"format {str(prop['format'])[:40]!r} is not supported"
    for key in ("oneOf", "anyOf"):
        options = prop.get(key)
        if options is not None and (
            not isinstance(options, list)
            or not all(isinstance(o, dict) and set(o) <= {"const", "title"} for o in options)
        ):
            return f"`{key}` may only list {{const, title}} options"
    items = prop.get("items")
    if kind == "array":
        if not isinstance(items, dict) or not (set(items) <= {"type", "enum", "anyOf", "oneOf"}):
            return "an array field needs `items` with an `enum` of strings"
        nested = _property_problem({"type": "string", **items})
        if nested:
            return f"items: {nested}"
    elif items is not None:
        return "`items` is only allowed on arrays"
    return None


def content_problem(schema: dict[str, Any], content: Any) -> tuple[str, str] | None:
    """(field path, what is wrong) when `content` does not answer `schema`, else None."""
    if not isinstance(content, dict):
        return "content", "must be an object of the requested fields"
    closed = {**schema, "additionalProperties": False}
    closed.pop("$schema", None)  # the form's fields, judged as Draft 2020-12 like every schema
    checker = schema_check.validator(closed)
    for error in sorted(checker.iter_errors(content), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in ("content", *error.absolute_path))
        return where, error.message[:300]
    for name, value in content.items():
        if isinstance(value, str) and len(value) > MAX_STRING:
            return f"content.{name}", f"is longer than {MAX_STRING} characters"
        if isinstance(value, list) and not all(isinstance(v, str) for v in value):
            return f"content.{name}", "a list answer may hold strings only"
        if isinstance(value, dict):
            return f"content.{name}", "nested objects are not allowed"
    return None


def describe_schema(schema: dict[str, Any]) -> str:
    """`name: string (required), age?: integer` for a notice."""
    required = set(schema.get("required") or [])
    parts = []
    for name, prop in (schema.get("properties") or {}).items():
        kind = prop.get("type", "any")
        if "enum" in prop:
            kind = "one of " + "/".join(str(v) for v in prop["enum"][:8])
        parts.append(f"{name}{'' if name in required else '?'}: {kind}")
    return ", ".join(parts) or "no fields"


# --------------------------------------------------------------------------- the callback


def elicitation_callback(conn: Requests) -> ElicitationFnT:
    """The SDK `elicitation_callback` of one connection (declares the capability)."""

    async def on_elicit(context: Any, params: Any) -> Any:
        try:
            return await _answer(conn, params)
        except Exception:  # the server gets `cancel`, the session stays up
            log.exception("MCP server '%s': elicitation failed", conn.name)
            return _result("cancel")

    return on_elicit


def _result(action: str, content: dict[str, Any] | None = None) -> Any:
    # deferred: a third-party package, loaded only when this path runs
    import mcp_types

    return mcp_types.ElicitResult(action=action, content=content)  # type: ignore[arg-type]


async def _answer(conn: Requests, params: Any) -> Any:
    asking = asking_run(conn, "asked for user input", elicitation="declined")
    if isinstance(asking, str):
        return _result("decline")
    caller, jobs = asking
    message = conn.mask(str(getattr(params, "message", "") or ""))[:MAX_MESSAGE]
    shown = message if len(message) <= 300 else message[:297] + "..."
    if getattr(params, "mode", "form") != "form":
        caller.notice(
            f"MCP server '{conn.name}' asked the user to open a URL ({shown}); declined: fim "
            "does not send users to a server's URL",
            elicitation="declined",
            server=conn.name,
        )
        return _result("decline")
    schema = params.requested_schema
    problem = schema_problem(schema)
    if problem:
        caller.notice(
            f"MCP server '{conn.name}' asked for user input with an unusable form "
            f"({problem}); declined",
            elicitation="declined",
            server=conn.name,
        )
        return _result("decline")
    if caller.no_human is not None:
        caller.notice(
            f"MCP server '{conn.name}' asked: {shown!r}; declined because {caller.no_human}",
            elicitation="declined",
            server=conn.name,
        )
        return _result("decline")
    if conn.asking:  # each question is a pending approval: no server floods the queue
        caller.notice(
            f"MCP server '{conn.name}' asked: {shown!r}; declined because its previous "
            "question still waits for an answer",
            elicitation="declined",
            server=conn.name,
        )
        return _result("decline")
    conn.asking = True
    for job in jobs:
        if job.deadline is not None:
            job.deadline.pause()
    try:
        return await _ask(conn, caller, jobs, message, schema)
    finally:
        conn.asking = False
        for job in jobs:
            if job.deadline is not None:
                job.deadline.resume()


async def _ask(
    conn: Requests, caller: Caller, jobs: list[Any], message: str, schema: dict[str, Any]
) -> Any:

    timeout = float(getattr(conn.decl, "elicitation_timeout", 300.0))
    store = get_store(caller.services)
    tools = sorted({job.tool or "request" for job in jobs})
    target = f"mcp__{conn.name}__{tools[0]}"

    approval_id = await store.create_approval(
        run_id=caller.run_id,
        agent=caller.agent,
        tool_name=target,
        args={"message": message, "schema": mask_strings(schema, conn.mask)},
        reason=f"MCP server '{conn.name}' asks the user: {message[:500]}",
        expires_at=time.time() + timeout,
        kind=KIND,
        data={"server": conn.name, "call_id": caller.call_id, "tools": tools},
    )
    example = json.dumps({k: "..." for k in (schema.get("properties") or {})})
    caller.notice(
        f"approval {approval_id}: MCP server '{conn.name}' asks: {message[:300]!r} "
        f"(fields: {describe_schema(schema)}). Answer with `fim approvals approve "
        f"{approval_id} --content '{example}'`, decline with `fim approvals deny "
        f"{approval_id}` or cancel with `fim approvals deny {approval_id} --cancel` "
        f"within {timeout:g}s.",
        approval_id=approval_id,
        elicitation="pending",
        server=conn.name,
    )
    waiting = asyncio.ensure_future(store.wait_approval(approval_id, timeout + 0.05))
    ended = [job.future for job in jobs]
    try:
        done, _ = await asyncio.wait({waiting, *ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not waiting.done():
            waiting.cancel()
    if waiting not in done:  # the call ended (cancelled, timed out) before an answer
        await store.resolve_approval(
            approval_id, False, by="fim", data={"note": "the tool call ended first"}
        )
        return _result("cancel")
    approval = waiting.result()
    status = getattr(approval, "status", "expired")
    data = getattr(approval, "data", {}) or {}
    if status == "approved":
        content = data.get("content") or {}
        problem = content_problem(schema, content)
        if problem is not None or not await store.consume_approval(approval_id):
            why = f"{problem[0]} {problem[1]}" if problem else "it was already used"
            caller.notice(
                f"approval {approval_id}: the answer cannot be sent ({why}); the server is "
                "answered `cancel`",
                approval_id=approval_id,
                elicitation="cancel",
            )
            return _result("cancel")
        caller.notice(
            f"approval {approval_id}: answered by {approval.resolved_by}; sent to "  # type: ignore[union-attr]
            f"MCP server '{conn.name}'",
            approval_id=approval_id,
            elicitation="accept",
        )
        return _result("accept", content)
    if status == "denied":
        action = "cancel" if data.get("action") == "cancel" else "decline"
        caller.notice(
            f"approval {approval_id}: the user chose {action}",
            approval_id=approval_id,
            elicitation=action,
        )
        return _result(action)
    caller.notice(
        f"approval {approval_id}: no answer within {timeout:g}s; MCP server '{conn.name}' "
        "is answered `cancel`",
        approval_id=approval_id,
        elicitation="cancel",
    )
    return _result("cancel")
