"""A stdio MCP server like newcomer-54's inventory server: `get_stock` of an unknown SKU
raises, after the server printed its traceback (and a token from its env) to stderr, as a
server's logging does. Run as `python tests/mcp_servers/stock54.py`."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback

if __name__ == "__main__":  # first: under a test process, a warm process runs this server
    with contextlib.suppress(ImportError):
        __import__("launch").relay(__file__)

from mcp.server.mcpserver import MCPServer

STOCK = {"SKU-1": 12}


def build() -> MCPServer:
    server = MCPServer("stock54", log_level="WARNING")

    @server.tool(description="Return how many units of a SKU are in stock")
    def get_stock(sku: str) -> str:
        try:
            if sku not in STOCK:
                raise ValueError(f"unknown sku {sku!r}; known: {', '.join(STOCK)}")
        except ValueError:
            sys.stderr.write(f"stock54: warehouse token {os.environ.get('WAREHOUSE_TOKEN')}\n")
            traceback.print_exc()
            sys.stderr.flush()
            raise
        return f"{sku}: {STOCK[sku]} in stock."

    return server


if __name__ == "__main__":
    sys.stderr.write("stock54: started\n")
    sys.stderr.flush()
    build().run()
