#!/bin/sh
# PreToolUse hook for crm__* tools, in the Claude Code hook protocol: the event arrives as
# JSON on stdin ({"tool_name": ..., "tool_input": {...}, ...}). Exit 0 allows the call;
# exit 2 blocks it and what we print on stderr is the reason the model reads.
# Deny rule: no bulk exports of contacts (search limit above 100).
exec python3 -c '
import json, sys

event = json.load(sys.stdin)
args = event.get("tool_input") or {}
if event.get("tool_name") == "crm__search_contacts":
    try:
        limit = int(args.get("limit", 20))
    except (TypeError, ValueError):
        limit = 0
    if limit > 100:
        print(f"blocked: bulk contact export (limit={limit}); search with limit <= 100 "
              "and a narrower query", file=sys.stderr)
        sys.exit(2)
sys.exit(0)
'
