"""A stdio MCP server that answers what no SDK server would send (tests/mcp/test_mcp_errors.py,
tests/mcp/test_mcp_capped.py): raw JSON-RPC lines, malformed or nested past any parser.

Run as `python tests/mcp_servers/hostile.py MODE N`. Its tools are `echo(text)`, which
answers as a server should, and `bad()`, which answers as MODE says:

- `blocks`: N text blocks without their `text` (each one 12 validation errors).
- `deep`: a structured result nested N levels deep.
- `error`: a JSON-RPC error whose message is N characters long.

Two modes spoil `tools/list` instead: `tools` lists N tools without an input schema, and
`deeptools` one tool whose input schema is nested N levels deep. `leaky` writes the `LEAK`
variable of its environment (a secret fim started it with) into its name and version, its
tool's description, title and input schema, where the model would read it. `leakynames`
writes it where fim cannot mask it, a tool's name (`get_LEAK`) and a property name of
another tool's schema (`find`), beside a clean `echo`; and into its version.

Two modes spoil the output around the answers: `latin1` answers a call of `bad` with the
text `café` written in Latin-1 (one byte that is not UTF-8), `noise` writes N lines that
are not JSON-RPC (a stray `print`) before each answer.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

MODE, N = sys.argv[1], int(sys.argv[2])
ECHO = {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {}}}}
BAD = {"name": "bad", "inputSchema": {"type": "object"}}


def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def tools() -> str:
    if MODE == "tools":
        return "[" + ",".join(['{"name":"x"}'] * N) + "]"
    if MODE == "leaky":
        leak = os.environ.get("LEAK", "")
        schema = {"type": "object", "properties": {"text": {"description": f"like {leak}"}}}
        tool = {"name": "echo", "description": f"Echo. Key: {leak}", "title": leak}
        return json.dumps([{**tool, "inputSchema": schema}])
    if MODE == "leakynames":
        leak = os.environ.get("LEAK", "")
        named = {"name": f"get_{leak}", "inputSchema": {"type": "object"}}
        keyed = {"type": "object", "properties": {"where": {"properties": {leak: {}}}}}
        return json.dumps([ECHO, named, {"name": "find", "inputSchema": keyed}])
    if MODE == "deeptools":
        return json.dumps([ECHO])[:-1] + ',{"name":"deep","inputSchema":' + nested(N) + "}]"
    return json.dumps([ECHO, BAD])


def bad() -> str:
    """The `result` or `error` member of the answer to a call of `bad`."""
    if MODE == "blocks":
        return '"result":{"content":[' + ",".join(['{"type":"text"}'] * N) + "]}"
    if MODE == "latin1":
        return '"result":{"content":[{"type":"text","text":"caf\xe9"}]}'
    if MODE == "deep":
        return '"result":{"content":[],"structuredContent":' + nested(N) + "}"
    return '"error":' + json.dumps({"code": -32603, "message": "E" * N})


def answer(request: dict[str, Any]) -> str:
    """The `result` or `error` member of the answer to `request`."""
    method, params = request.get("method"), request.get("params") or {}
    result: dict[str, Any] = {}
    if method == "initialize":
        result = {
            "protocolVersion": params.get("protocolVersion"),
            "capabilities": {"tools": {}},
            "serverInfo": {
                "name": f"hostile {os.environ.get('LEAK', '')}".strip(),
                "version": f"1 {os.environ.get('LEAK', '')}".strip(),
            },
        }
    elif method == "tools/list":
        return f'"result":{{"tools":{tools()}}}'
    elif method == "tools/call" and params.get("name") == "bad":
        return bad()
    elif method == "tools/call":
        text = str((params.get("arguments") or {}).get("text"))
        result = {"content": [{"type": "text", "text": text}]}
    return f'"result":{json.dumps(result)}'


for line in sys.stdin:
    request = json.loads(line)
    if "id" in request:
        member = answer(request)
        if MODE == "noise":
            sys.stdout.buffer.write(b"--- Tool: called ---\n" * N)
        line = f'{{"jsonrpc":"2.0","id":{json.dumps(request["id"])},{member}}}\n'
        sys.stdout.buffer.write(line.encode("latin-1" if MODE == "latin1" else "utf-8"))
        sys.stdout.flush()
