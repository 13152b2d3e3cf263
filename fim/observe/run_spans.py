"""The spans of one traced run or workflow, opened and closed from its events
(`fim.observe.tracing` makes them), and the context variable naming the innermost one.

Span tree: `invoke_agent {agent}` per run, `chat {model}` per model call, `execute_tool
{name}` per tool call (hook decisions as span events, blocked or failed calls with error
status), `workflow {name}` and `node {id}` for workflows, `step {id}` for dag steps. A
delegated run or a workflow's agent node is a child of the tool call or node that started
it: the parent's `RunSpans` is kept in `trace_scope`, which the child's reads.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import Callable
from functools import partial
from typing import Any

from opentelemetry.trace import SpanContext, SpanKind

from fim.events import Event, Token
from fim.observe.context import current_call, current_node
from fim.observe.gen_ai import chat_content, chat_head, provider_of, tool_http
from fim.observe.scope import trace_scope
from fim.observe.sdk import DIRECT_ATTRIBUTES, ChildSpan, OpenSpan, Sink
from fim.observe.span_writers import writers
from fim.project_frames import exception_attributes

log = logging.getLogger("fim.observe")


def _ns(ts: float) -> int:
    return int(ts * 1e9)


class RunSpans:
    """The spans of one run or workflow, opened and closed from its events."""

    def __init__(self, root: OpenSpan, mask: Callable[[str], str] | None, found: Sink) -> None:
        self.root = root
        self.emit: Callable[[OpenSpan, int], None] = found.emit
        self.span_id = found.ids.generate_span_id
        self.bits = found.bits
        self.found = found
        self.direct = found.direct
        if found.direct:  # the run's spans framed here, as `Sink` would frame them
            self.emit = self._emit_framed
            self.number, self.framed_root, prefix, queue_child = writers()
            # no closure per run: a C-level partial of a module function
            self.child: Callable[..., None] = partial(
                queue_child, prefix(root.context), found.queue
            )
        else:
            self.child = found.children_of(root.context)
        trace_id, _, _, flags, state, _ = root.context  # a tuple: no property calls
        self.trace = (trace_id, flags, state)
        """What every span of the run shares with its root, read once."""
        self.mask = mask or (lambda text: text)
        self.capture = found.capture
        self.tools: dict[str, tuple[ChildSpan, str, Any]] = {}
        """Open tool calls: call id -> span, tool name, the agent a `call_agent` names."""
        self.nodes: dict[str, tuple[ChildSpan, str]] = {}
        self.steps: dict[str, ChildSpan] = {}
        self.failed = False
        self.token: Any = None
        self.handlers = HANDLERS
        """Event type -> handler; emptied if one fails."""
        self.pending: list[Event] = []
        """Events seen and not yet read (`on` only keeps them: `read` builds the spans)."""

    def __repr__(self) -> str:
        return f"span {self.root.name!r}"

    # -- the run's start and end (a `fim.observe.Watch`) -----------------------------

    def __enter__(self) -> RunSpans:
        self.token = trace_scope.set(self)
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            self.read()
            if exc is not None:
                self.record(exc)
            self.close()
        except Exception:  # as in `on`: the run's own outcome stands
            log.exception("tracing of %s failed at its end", self)
        finally:
            try:  # noqa: SIM105 -- `suppress` builds a context manager on every run
                trace_scope.reset(self.token)
            except ValueError:  # closed from another context
                pass

    # -- children of this trace (delegations, agent nodes) -------------------------

    def context_for(self, agent: str) -> SpanContext:
        self.read()
        span = self.parent_for(agent)
        if span is self.root:
            return self.root.context
        trace_id, flags, state = self.trace
        return SpanContext(trace_id, span.span_id, False, flags, state)

    def parent_for(self, agent: str) -> ChildSpan:
        """The span a child run started now belongs under: the open `call_agent` call
        naming this agent, else the only open tool call, else the newest open agent node,
        else this trace's root."""

        call = current_call.get()
        if call is not None and call in self.tools:
            return self.tools[call][0]
        node = current_node.get()
        if node is not None:
            if node not in self.nodes:  # the node's task ran before its event was read
                self.nodes[node] = (self._start(f"node {node}", time.time(), {}), "")
            return self.nodes[node][0]
        calls = [span for span, name, args in self.tools.values() if name == "call_agent"]
        named = [
            span
            for span, name, called in self.tools.values()
            if name == "call_agent" and called == agent
        ]
        if named:
            return named[0]
        if len(calls) == 1 or len(self.tools) == 1:
            return (calls or [s for s, _, _ in self.tools.values()])[0]
        agents = [span for span, kind in self.nodes.values() if kind == "agent"]
        if agents:
            return agents[-1]
        if len(self.nodes) == 1:
            return next(iter(self.nodes.values()))[0]
        return self.root

    def _start(
        self,
        name: str,
        ts: float,
        attributes: dict[str, Any],
        kind: SpanKind = SpanKind.INTERNAL,
    ) -> ChildSpan:
        """A child of the root started at `ts` (no None values: callers leave them out)."""
        return ChildSpan(name, self.bits(64) or self.span_id(), kind, int(ts * 1e9), attributes)

    # -- events --------------------------------------------------------------------

    def on(self, event: Event) -> None:
        if type(event) is not Token:  # streamed tokens build no span (`read` skips the rest)
            pending = self.pending
            pending.append(event)
            if len(pending) >= READ_EVERY:  # a long run's spans go out as it goes
                self.read()

    @property
    def trace_id(self) -> str:
        """The run's trace id as trace backends show it (the engine puts it in the run's
        `run_started`: the CLI, the store, the HTTP answers and the dev page carry it)."""
        return f"{self.trace[0]:032x}"

    def read(self) -> None:
        """Build the spans of the events seen so far.

        Spans are built when the run ends, every `READ_EVERY` events, or when the run asks
        for the span its work belongs to (`context_for`: a delegated run, an outgoing HTTP
        call), not event by event: built together, the handlers and the encoder stay in
        the CPU's caches (in process, ~3 points of the ~15% tracing added to a run)."""
        pending, self.pending = self.pending, []
        handlers = self.handlers
        for event in pending:
            handler = handlers.get(event.type)
            if handler is not None:
                try:
                    handler(self, event)
                except Exception:  # tracing never fails a run: this one's spans stop here
                    log.exception("tracing of %s failed; its remaining events are not traced", self)
                    self.handlers = handlers = {}
                    self.root.error("tracing failed")

    def _emit_framed(self, root: OpenSpan, end: int) -> None:
        """`Sink.emit` of the run's own span when spans are queued serialized (`direct`)."""
        if len(root.attributes) > DIRECT_ATTRIBUTES:  # the span limits apply: as the SDK's
            return self.found.emit(root, end)
        self.found.queue(self.framed_root(root, end))

    def _end(self, span: ChildSpan, end: int) -> None:
        """End a child of the root (a tool call, node or step)."""
        self.child(
            span.name, span.span_id, span.kind, span.start, end, span.attributes,
            span.events, span.status,
        )  # fmt: skip

    def _on_run_started(self, e: Any) -> None:
        attributes = self.root.attributes
        attributes["fim.engine"] = e.engine
        if e.snapshot_version:
            attributes["fim.snapshot.version"] = e.snapshot_version
        if self.capture:
            attributes["gen_ai.input.messages"] = self.mask(e.input)

    def _on_llm_call(self, e: Any) -> None:
        fields = e.__dict__  # not a dozen lookups through pydantic's `__getattr__` hook
        model, usage = fields["model"], fields["usage"].__dict__
        request_model = fields["request_model"] or model
        head = (request_model, model, fields["provider"] or provider_of(request_model),
                fields["finish_reason"])  # fmt: skip
        cost = usage["cost"]
        attributes: dict[str, Any] | bytes
        if self.direct and not (self.capture and fields["request"]):  # `Sink.direct`: bytes
            number = self.number
            attributes = (
                self.found.kept_block(head, chat_head)
                + number("gen_ai.usage.input_tokens", usage["prompt_tokens"])
                + number("gen_ai.usage.output_tokens", usage["completion_tokens"])
                + number("fim.iteration", fields["iteration"])
                + (b"" if cost is None else number("fim.cost_usd", cost))
            )
        else:
            attributes = {
                **chat_head(head),
                "gen_ai.usage.input_tokens": usage["prompt_tokens"],
                "gen_ai.usage.output_tokens": usage["completion_tokens"],
                "fim.iteration": fields["iteration"],
            }
            if cost is not None:
                attributes["fim.cost_usd"] = cost
            if self.capture and fields["request"]:  # what was sent and answered (newcomer-53 #2)
                attributes.update(chat_content(self, fields))
        ts = fields["ts"]
        self.child(
            f"chat {request_model}",
            self.bits(64) or self.span_id(),
            SpanKind.CLIENT,
            int((ts - fields["duration_ms"] / 1000) * 1e9),
            int(ts * 1e9),
            attributes,
        )

    def _on_tool_call(self, e: Any) -> None:
        # The name and the id are written by the model too (an unknown tool's name is
        # whatever it sent): masked like the arguments.
        name = self.mask(e.name)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": self.mask(e.call_id),
        }
        if self.capture:
            attributes["gen_ai.tool.call.arguments"] = self.mask(
                json.dumps(e.arguments, default=str)
            )
        span = self._start(f"execute_tool {name}", e.ts, attributes)
        named = e.arguments.get("agent") if e.name == "call_agent" else None
        self.tools[e.call_id] = (span, e.name, named)

    def _on_hook(self, e: Any) -> None:
        target: ChildSpan = self.root
        if getattr(e, "call_id", None) in self.tools:
            target = self.tools[e.call_id][0]
        elif e.tool_name is not None:
            open_ = [(s, n) for s, n, _ in self.tools.values()]
            same = [s for s, n in open_ if n == e.tool_name]
            if same:
                target = same[0]
            elif len(open_) == 1:
                target = open_[0][0]
        attributes = {
            "fim.hook": e.hook,
            "fim.hook.point": e.point,
            "fim.hook.decision": e.decision,
        }
        if e.reason:
            attributes["fim.hook.reason"] = self.mask(e.reason)
        target.add_event("fim.hook", attributes, _ns(e.ts))
        if e.traceback:  # a Python hook raised: the project's frames (newcomer-53 #1)
            target.add_event("exception", exception_attributes(self.mask(e.traceback)), _ns(e.ts))
        if e.decision == "block":
            target.attributes["fim.tool.blocked"] = True
            target.error(f"blocked by hook {e.hook}")

    def _on_tool_result(self, e: Any) -> None:
        if (opened := self.tools.pop(e.call_id, None)) is None:
            return
        span = opened[0]
        span.attributes.update(tool_http(e.http, self.mask))  # a connector's HTTP request
        if self.capture:
            span.attributes["gen_ai.tool.call.result"] = self.mask(e.content)
        if e.is_error:
            span.attributes["error.type"] = "tool_error"
            span.error(self.mask(e.content)[:200])
        if e.traceback:  # a project's tool raised: OpenTelemetry's `record_exception` event
            span.add_event("exception", exception_attributes(self.mask(e.traceback)), _ns(e.ts))
        self._end(span, _ns(e.ts))

    def _on_error(self, e: Any) -> None:
        self.failed = True
        root = self.root
        root.add_event(
            "fim.error",
            {"fim.error.kind": e.kind, "message": self.mask(e.message)[:1000]},
            _ns(e.ts),
        )
        root.attributes["error.type"] = e.kind
        root.error(self.mask(e.message)[:200])

    def _on_run_finished(self, e: Any) -> None:
        attributes = self.root.attributes
        attributes["fim.status"] = e.status
        attributes["fim.iterations"] = e.iterations
        attributes["gen_ai.usage.input_tokens"] = e.usage.prompt_tokens
        attributes["gen_ai.usage.output_tokens"] = e.usage.completion_tokens
        if e.usage.cost is not None:
            attributes["fim.cost_usd"] = e.usage.cost
        if self.capture:
            attributes["gen_ai.output.messages"] = self.mask(e.output)
        if e.status != "ok" and not self.failed:
            self.root.error(e.status)

    def _on_step_started(self, e: Any) -> None:
        step: Any = self.mask(e.step)  # the planner (a model) names the steps
        self.steps[e.step] = self._start(f"step {step}", e.ts, {"fim.step": step})

    def _on_step_finished(self, e: Any) -> None:
        span = self.steps.pop(e.step, None)
        if span is not None:
            if e.status != "ok":
                span.error(e.status)
            self._end(span, _ns(e.ts))

    def _on_node_started(self, e: Any) -> None:
        if e.node in self.nodes:  # opened early by a run the node started
            span = self.nodes[e.node][0]
            span.attributes["fim.node"] = e.node
            span.attributes["fim.node.type"] = e.node_type
            self.nodes[e.node] = (span, e.node_type)
            return
        span = self._start(
            f"node {e.node}", e.ts, {"fim.node": e.node, "fim.node.type": e.node_type}
        )
        self.nodes[e.node] = (span, e.node_type)

    def _on_node_finished(self, e: Any) -> None:
        opened = self.nodes.pop(e.node, None)
        if opened is not None:
            self._end(opened[0], _ns(e.ts))

    def _on_node_failed(self, e: Any) -> None:
        opened = self.nodes.pop(e.node, None)
        if opened is not None:
            opened[0].attributes["fim.node.attempt"] = e.attempt
            opened[0].error(self.mask(e.error)[:200])
            self._end(opened[0], _ns(e.ts))

    def _on_node_skipped(self, e: Any) -> None:
        self.root.add_event(
            "fim.node_skipped", {"fim.node": e.node, "reason": self.mask(e.reason)}, _ns(e.ts)
        )

    def _on_workflow_finished(self, e: Any) -> None:
        self.root.attributes["fim.status"] = e.status
        if e.status in ("failed", "cancelled"):
            self.root.error(e.status)

    def record(self, exc: BaseException) -> None:
        """What the SDK's `record_exception` adds, with the message and the stack masked
        (a tool's error text may quote a secret)."""
        stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.root.add_event(
            "exception",
            {
                "exception.type": type(exc).__name__,
                "exception.message": self.mask(str(exc)),
                "exception.stacktrace": self.mask(stack),
                "exception.escaped": "False",
            },
            time.time_ns(),
        )
        self.root.error(type(exc).__name__)

    def close(self) -> None:
        """End whatever the stream left open (a cancelled run): nothing leaks."""
        self.read()
        now = time.time_ns()
        for span, _, _ in self.tools.values():
            span.error("not finished")
            self._end(span, now)
        for span, _ in self.nodes.values():
            self._end(span, now)
        for span in self.steps.values():
            self._end(span, now)
        self.emit(self.root, now)


READ_EVERY = 32
"""Events a run's spans wait for at most before they are built (`RunSpans.read`)."""

HANDLERS: dict[str, Callable[[RunSpans, Any], None]] = {
    name[len("_on_") :]: fn for name, fn in vars(RunSpans).items() if name.startswith("_on_")
}
"""Event type -> handler, built once (tokens and other unhandled events cost one lookup)."""
