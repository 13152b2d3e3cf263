"""What every workflow node type is made of, and the registry the YAML schema is built from.

A node type is one subclass of `NodeType` in one file of this package. The class is the
pydantic model of the node's YAML (its `type` literal names it) and carries the rest of the
type with it:

- `execute(ctx)`: the executor; it reaches models, tools, connectors, agents and the store only
  through the `NodeRuntime` it is handed (`fim.workflows.nodes.NodeContext`), so this package
  sits in the config layer and the schema can be built from it;
- `check_refs(at)`: cross-reference checks at compile time through a `NodeChecks`
  (`fim.build.workflow_checks` hands one in);
- `graph_label()`: the node's line in `fim graph`, and `shape`, its Mermaid bracket pair;
- `uses()`: the tools, MCP tools, models and agents a run of the node reaches, read by the
  checks that look ahead of a run (`fim validate`'s hook targets, the preflight, eval's
  replay skip), so none of them names a node type. Optional: the default is "nothing".

Creating a subclass registers it in `NODE_TYPES`; a subclass without a one-value `type`
literal, with a taken type name, or that leaves `execute`, `check_refs` or `graph_label` to
this base is a
`TypeError` when its module is imported, so a half-written node type never reaches a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, get_args, get_origin

from pydantic import Field
from pydantic_core import from_json

from fim.config.schema.base import Strict, empty_list
from fim.structured import finite

if TYPE_CHECKING:
    from fim.types import Tool


class Retry(Strict):
    count: int = Field(default=0, ge=0)
    """Extra attempts after a failed one (0: none)."""
    backoff: float = Field(default=0.5, ge=0)
    """Seconds before the first retry; doubles each attempt."""


class NodeError(Exception):
    """A node failed; the message is what `show` and the events display."""


@dataclass(frozen=True)
class Paused:
    """Returned by a node that waits for a human: the run pauses until it is resolved."""

    approval_id: str
    prompt: str


def parse_output(content: str) -> Any:
    """Tool text -> the node's output: JSON objects/arrays become data (so templates can
    say `nodes.lookup.output.amount`), anything else stays text. So does a document with
    NaN or Infinity in it (`fim.structured.finite`: a NaN amount would make every condition
    on it false) or one nested past the parser's limit (pydantic-core's parser stops there
    without Python recursion, where `json.loads` raised RecursionError out of the node)."""
    stripped = content.strip()
    if stripped[:1] in ("{", "["):
        try:
            return finite(from_json(stripped))
        except ValueError:
            return content
    return content


class NodeRuntime(Protocol):
    """What an executor may do during a run; `fim.workflows.nodes.NodeContext` is the one
    implementation. Every method that can fail for a user-facing reason raises NodeError."""

    scope: dict[str, Any]

    def render(self, value: Any) -> Any: ...

    def render_text(self, value: str) -> str: ...

    def truthy(self, expression: str) -> bool: ...

    def resolve_tool(self, name: str) -> Tool: ...

    async def call_tool(
        self,
        tool: Tool,
        args: dict[str, Any],
        timeout: float | None = None,
        sources: Mapping[str, Any] | None = None,
    ) -> Any: ...

    def connector_action(self, connector: str, action: str) -> Tool: ...

    async def run_sql(self, connector: str, sql: str, params: dict[str, Any]) -> Any: ...

    async def call_mcp(self, server: str, tool: str, args: dict[str, Any]) -> Any: ...

    async def ask_agent(self, agent: str, task: str, output_schema: Any) -> Any: ...

    async def complete(self, model: Any, system: str | None, prompt: str, schema: Any) -> Any: ...

    async def pause(self, prompt: str, expires_in: float | None = None) -> Paused: ...


class NodeChecks(Protocol):
    """The compiler's view of one node (`fim.build.workflow_checks`): `where` is a path
    below the node (`("connector",)`), problems point at that value in the file."""

    def problem(self, where: tuple[str | int, ...], message: str, hint: str | None) -> None: ...

    def ref(self, where: tuple[str | int, ...], kind: str, name: str) -> bool: ...

    def model(self, where: tuple[str | int, ...], ref: Any) -> None: ...

    def output_schema(self, where: tuple[str | int, ...], spec: Any) -> None: ...

    def connector(self, name: str) -> Any:
        """The declaration of connector `name` (after `ref` said it exists)."""
        ...

    def mcp_servers(self) -> Mapping[str, Any] | None:
        """The MCP servers of fim.yaml; None when fim.yaml itself is broken."""
        ...

    def builtin_tools(self) -> frozenset[str]: ...

    def tool(self, where: tuple[str | int, ...], entry: str) -> None:
        """Report what is wrong with a tool entry (a builtin's name or `module:function`),
        read as an agent's `tools:` entry is, without importing anything."""
        ...


@dataclass(frozen=True)
class NodeUses:
    """What a run of one node reaches, known from its declaration alone."""

    tools: tuple[str, ...] = ()
    """Tool names as hooks see them: a builtin or project tool, `<connector>__<action>`."""
    mcp: tuple[tuple[str, str], ...] = ()
    """(server, tool) pairs of MCP calls."""
    models: tuple[Any, ...] = ()
    """Model refs (a role name or a `ModelRef`) the node asks itself."""
    agents: tuple[str, ...] = ()
    """Agents the node runs (their own tools, models and servers count too)."""


NODE_TYPES: dict[str, type[NodeType]] = {}
"""Type name -> node class, in registration order (the order of the schema's union)."""

_REQUIRED = ("execute", "check_refs", "graph_label")


class NodeType(Strict):
    """The fields every node has, and the pieces every node type must supply."""

    needs: list[str] = Field(default_factory=empty_list)
    """Nodes that must finish before this one starts."""
    timeout: float | None = None
    """Seconds one attempt may take; past it the attempt fails."""
    retry: Retry = Field(default_factory=Retry)
    """Attempts again after a failure: `{count, backoff}`."""
    on_error: Literal["fail", "continue"] = "fail"
    """`fail`: the run fails; `continue`: output `{error: ...}`, the nodes after it run."""
    description: str = ""
    """What the node is for (for readers of the file)."""

    if TYPE_CHECKING:  # each node type declares it as a one-value Literal (its name)
        type: str

    shape: ClassVar[str] = "[{}]"
    """The Mermaid bracket pair around the node's label (`[{}]`, `({})`, `{{{}}}`...)."""
    template_fields: ClassVar[tuple[str, ...]] = ()
    """Fields holding Jinja templates, checked at compile time (python names: `if_`)."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        where = f"{cls.__module__}.{cls.__qualname__}"
        annotation = cls.model_fields["type"].annotation
        values = get_args(annotation) if get_origin(annotation) is Literal else ()
        if len(values) != 1 or not isinstance(values[0], str):
            raise TypeError(f"node type {where} must declare `type: Literal['<name>']`")
        missing = [name for name in _REQUIRED if getattr(cls, name) is getattr(NodeType, name)]
        if missing:
            raise TypeError(
                f"node type {where} ('{values[0]}') has no {', '.join(missing)}: a node type "
                "defines its executor execute(ctx), its compile-time check_refs(at) and its "
                "graph_label() in the same class"
            )
        taken = NODE_TYPES.get(values[0])
        if taken is not None and (taken.__module__, taken.__qualname__) != (
            cls.__module__,
            cls.__qualname__,
        ):
            raise TypeError(
                f"node type {where}: type '{values[0]}' is already {taken.__module__}."
                f"{taken.__qualname__}"
            )
        NODE_TYPES[values[0]] = cls

    async def execute(self, ctx: NodeRuntime) -> Any:
        """Run the node and return its output (or a `Paused`)."""
        raise NotImplementedError

    def check_refs(self, at: NodeChecks) -> None:
        """Report what this node names that the project does not have."""
        raise NotImplementedError

    def graph_label(self) -> str:
        """The second line of the node's box in `fim graph` (plain text, escaped later)."""
        raise NotImplementedError

    def uses(self) -> NodeUses:
        """What a run of this node reaches (see `NodeUses`); a node that reaches nothing
        outside the workflow (a condition, a human approval) keeps this default."""
        return NodeUses()

    def branches(self) -> list[tuple[str, str, list[str]]]:
        """Edges this node adds besides `needs`: (label, field alias, targets). A target
        runs only after this node decided, so it counts as depending on it."""
        return []


def targets(value: str | list[str] | None) -> list[str]:
    """A `then`/`else` value as a list of node names."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)
