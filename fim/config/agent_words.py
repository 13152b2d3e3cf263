"""Google ADK's and openai-agents' words in an agent file, and what fim has for each: the
hints an agent ported from either gets where fim reads it (`AgentDecl.unknown_key_hint`).

An ADK user writes `sub_agents:`, `output_key:`, `before_tool_callback:` and
`generate_content_config:` from memory; an openai-agents user `handoffs:`,
`model_settings:` and `input_guardrails:`. A did-you-mean over fim's keys gets them wrong
in ways that change what the agent does (`output_key` was "did you mean 'output_schema'?",
which turns the agent into a JSON-only one), or lists fim's keys cut off. These words are
not aliases: each is an error whose hint is fim's way of saying it, with the user's own
value where one fits (`write \\`delegates: [greeting_agent]\\``), as promptfoo's words in
an eval suite are (`fim.config.promptfoo_words`).

docker-agent's `toolsets:` and a Claude `mcpServers` entry pasted into an agent's `mcp:`
list get the same: MCP servers are declared once, in fim.yaml's `mcp_servers:`, and an
agent lists them by name (newcomer-54 #13).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fim.config.promptfoo_words import shown

_DELEGATES = (
    "agents this one calls through `call_agent`, as tools: the caller keeps the "
    "conversation and gets the answer back (fim has no handoff)"
)
_BEFORE_TOOL = (
    "fim's is a PreToolUse hook: `hooks: [{event: PreToolUse, python: module:Class}]` "
    "(a class in hooks/, subclassing fim.hooks.base.PreToolUseHook) or `{event: PreToolUse, "
    "command: ...}`; it may block the call or change its arguments"
)
_AFTER_TOOL = (
    "fim's is a PostToolUse hook: `hooks: [{event: PostToolUse, python: module:Class}]` "
    "(fim.hooks.base.PostToolUseHook) or `{event: PostToolUse, command: ...}`; it may "
    "rewrite or block the result"
)
_NO_MODEL_HOOK = (
    "fim has no hook around a model call; hooks run at SessionStart (before the first "
    "call: `hooks: [{event: SessionStart, python: module:Class}]`), PreToolUse and "
    "PostToolUse (around each tool call)"
)
_INPUT_GUARD = (
    "fim's guards are hooks: a SessionStart hook (`hooks: [{event: SessionStart, python: "
    "module:Class}]`) can refuse the session, PreToolUse hooks each tool call; fim has no "
    "check of the user's message itself"
)
_OUTPUT_GUARD = (
    "fim's guards are hooks: a PostToolUse hook (`hooks: [{event: PostToolUse, python: "
    "module:Class}]`) checks each tool result; fim has no hook on the final answer "
    "(`output_schema:` checks its shape)"
)

AGENT_KEYS: dict[str, str] = {
    "sub_agents": _DELEGATES,
    "handoffs": _DELEGATES,
    "agents_as_tools": _DELEGATES,
    "instruction": "fim calls it `instructions:`",
    "global_instruction": "fim calls it `instructions:` (one system prompt per agent)",
    "system_prompt": "fim calls it `instructions:`",
    "handoff_description": "fim calls it `description:` (what delegating agents are shown)",
    "output_key": "fim keeps no session state to save the answer into: an agent's answer "
    "goes back to its caller (a delegating agent's `call_agent`, a workflow node's "
    "`{{ nodes.NAME.output }}`); delete this key",
    "output_type": "fim calls it `output_schema:` (inline JSON Schema, or `module:Class` "
    "for a pydantic model in hooks/)",
    "tool_use_behavior": "fim has no stop-on-tool: the model answers after its tool calls; "
    "a workflow's `type: tool` node returns a tool's result as it is",
    "before_tool_callback": _BEFORE_TOOL,
    "after_tool_callback": _AFTER_TOOL,
    "before_model_callback": _NO_MODEL_HOOK,
    "after_model_callback": _NO_MODEL_HOOK,
    "before_agent_callback": "fim's is a SessionStart hook: `hooks: [{event: SessionStart, "
    "python: module:Class}]` (fim.hooks.base.SessionStartHook), which may add context or "
    "refuse the session",
    "after_agent_callback": "fim has no hook after the answer; an eval suite's `expect:` "
    "checks answers",
    "input_guardrails": _INPUT_GUARD,
    "output_guardrails": _OUTPUT_GUARD,
    "mcp_servers": "fim declares MCP servers in fim.yaml's `mcp_servers:`; an agent names "
    "the ones it uses: `mcp: [NAME]`",
    "code_executor": "fim's is the builtin tool: `tools: [python_exec]` (in an OS sandbox)",
}
"""ADK's and openai-agents' keys of an agent that fim has another way of saying (or none),
and what to write; the model settings are `model_words`."""

_SETTINGS = {
    "temperature": "temperature",
    "max_tokens": "max_tokens",
    "max_output_tokens": "max_tokens",
}
"""Sampling fields that are fim model settings of their own; any other goes in `extra:`."""

MODEL_KEYS = frozenset(
    {"temperature", "top_p", "top_k", "max_tokens", "model_settings", "generate_content_config"}
)
"""Keys holding model settings, which fim keeps on the agent's `model:`."""


def _settings_of(key: str, value: Any) -> dict[str, Any]:
    """The fim model settings (`ModelSettings`' fields) the value of `key` says."""
    given = value if isinstance(value, Mapping) else {key: value}
    found: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for name, item in given.items():
        name = str(name)
        if name in _SETTINGS:
            found[_SETTINGS[name]] = item
        elif name not in ("model_settings", "generate_content_config"):
            extra[name] = item
    if extra:
        found["extra"] = extra
    return found


def model_words(key: str, value: Any) -> str:
    """The hint for a model setting written on the agent (`temperature: 0.2`,
    `model_settings: {temperature: 0.2}`): fim's `model: {model: general, temperature:
    0.2}`, with the user's values in fim's fields (`max_output_tokens` is `max_tokens`,
    `top_p` goes in `extra:`)."""
    settings = {"model": "general", **_settings_of(key, value)}
    if len(settings) == 1:  # `model_settings: {}`
        settings["temperature"] = 0.2
    inner = ", ".join(f"{k}: {_flow(v)}" for k, v in settings.items())
    hint = (
        f"fim keeps sampling settings on the agent's model: write `model: {{{inner}}}` "
        "(your role or litellm string as `model`; settings fim has no field for go in "
        "`extra:`, passed to the provider as they are)"
    )
    if key == "max_tokens":
        hint += "; a whole run's token limit is `budget: {max_tokens: N}`"
    return hint


def _flow(value: Any) -> str:
    """A value as YAML flow text (a nested mapping in braces)."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    return shown(value)


_SERVERS = (
    "declare each server once in fim.yaml's `mcp_servers:` under a name (`inventory: "
    "{command: python, args: [inventory.py]}`, or `{url: ...}`: a Claude `mcpServers` "
    "entry as it is) and list the names in the agent: `mcp: [inventory]`"
)
TOOLSET_TOOLS = {"filesystem": "file_ops", "shell": "shell", "fetch": "web_fetch"}
"""docker-agent's builtin toolsets that are a fim builtin tool."""


def toolsets_hint(value: Any) -> str:
    """The hint for docker-agent's `toolsets:`: its `type: mcp` toolsets are fim's MCP
    servers, its builtin ones (`filesystem`, `shell`) fim's `tools:`."""
    kinds = (
        [str(s.get("type")) for s in value if isinstance(s, Mapping)]
        if isinstance(value, list)
        else []
    )
    tools = list(dict.fromkeys(TOOLSET_TOOLS[k] for k in kinds if k in TOOLSET_TOOLS))
    builtin = f"`tools: [{', '.join(tools)}]`" if tools else "`tools:` (file_ops, shell, ...)"
    return (
        f"docker-agent's `type: mcp` toolsets are fim's MCP servers: {_SERVERS}; its builtin "
        f"toolsets are fim's {builtin}"
    )


def inline_server_hint(value: Any) -> str | None:
    """The hint for an agent's `mcp:` list holding a server itself (`{command: python,
    args: [...]}`, a Claude `mcpServers` entry) where a name goes, or None."""
    if not isinstance(value, list) or not any(isinstance(item, Mapping) for item in value):
        return None
    return f"an agent's `mcp:` lists servers by name: {_SERVERS}"


def agent_hint(key: str, value: Any) -> str | None:
    """What fim has for ADK's or openai-agents' agent key `key` (with `value`), or None
    when `key` is not one of their words."""
    if key in MODEL_KEYS:
        return model_words(key, value)
    if key == "toolsets":
        return toolsets_hint(value)
    hint = AGENT_KEYS.get(key)
    if hint is None:
        return None
    if hint is _DELEGATES:
        names = value if isinstance(value, list) else []
        if names and all(isinstance(n, str) for n in names):
            return f"write `delegates: [{', '.join(names)}]`, {hint}"
        return f"fim calls them `delegates:`, {hint}"
    return hint


__all__ = [
    "AGENT_KEYS",
    "MODEL_KEYS",
    "TOOLSET_TOOLS",
    "agent_hint",
    "inline_server_hint",
    "model_words",
    "toolsets_hint",
]
