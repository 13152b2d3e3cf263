"""Prompt tokens of progressive disclosure vs legacy tools, measured in one run.

Each section builds a realistic agent, assembles it through the real providers in both
modes, and counts what the first request carries: the provider's system-prompt section
plus the JSON of its tool definitions, in tiktoken `cl100k_base` tokens. The encoding is
read from litellm's bundled copy (no download). Not a timed test: it prints what it saw.

    python bench/context_cost.py

Sections are functions returning rows (`connectors_section`, ...); add one by appending it
to SECTIONS.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl, DatabaseConnector, HttpConnector, Project
from fim.run.services import Provision, RunContext, Services


@dataclass
class Row:
    """One scenario: tokens in progressive and in legacy mode."""

    section: str
    scenario: str
    progressive: int
    legacy: int

    @property
    def reduction(self) -> float:
        return 1 - self.progressive / self.legacy if self.legacy else 0.0


# ------------------------------------------------------------------ tokens


def _encoding() -> Any:
    """cl100k_base from litellm's bundled tokenizer files (found without importing litellm)."""
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        spec = importlib.util.find_spec("litellm")
        for location in spec.submodule_search_locations or [] if spec else []:
            bundled = Path(location) / "litellm_core_utils" / "tokenizers"
            if bundled.is_dir():
                os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled)
    import tiktoken

    return tiktoken.get_encoding("cl100k_base")


_ENC: Any = None


def tokens(text: str) -> int:
    global _ENC
    if _ENC is None:
        _ENC = _encoding()
    return len(_ENC.encode(text, disallowed_special=()))


def provision_tokens(provision: Provision | None) -> tuple[int, int]:
    """(system prompt section tokens, tool definitions JSON tokens)."""
    if provision is None:
        return 0, 0
    definitions = [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in provision.tools
    ]
    return tokens(provision.prompt or ""), tokens(json.dumps(definitions, ensure_ascii=False))


# ------------------------------------------------------------------ connectors

_SYSTEMS = {
    "crm": ("CRM of Acme: contacts, companies, deals", ["contact", "company", "deal", "lead"]),
    "billing": ("Billing: invoices, payments, refunds", ["invoice", "payment", "refund", "plan"]),
    "helpdesk": ("Helpdesk tickets and replies", ["ticket", "reply", "macro", "agent"]),
    "inventory": ("Warehouse stock and products", ["product", "stock_item", "warehouse", "sku"]),
    "shipping": ("Shipments and carriers", ["shipment", "carrier", "label", "pickup"]),
}
_VERBS = [("list", "GET"), ("get", "GET"), ("create", "POST"), ("update", "PATCH")]
_EXTRA_VERBS = [("delete", "DELETE")]

_TABLE_WORDS = [
    "orders", "order_items", "customers", "addresses", "products", "categories", "suppliers",
    "purchase_orders", "invoices", "payments", "refunds", "shipments", "carriers", "returns",
    "reviews", "coupons", "campaigns", "employees", "departments", "stores", "warehouses",
    "stock_levels", "price_history", "tax_rates", "currencies", "sessions", "events",
    "subscriptions", "plans", "audit_log",
]  # fmt: skip


def _object_fields(obj: str) -> dict[str, Any]:
    return {
        "name": {"type": "string", "description": f"Display name of the {obj}."},
        "status": {
            "type": "string",
            "enum": ["active", "pending", "archived"],
            "description": f"Lifecycle status of the {obj}.",
        },
        "owner_id": {"type": "string", "description": "Id of the responsible user."},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "Free labels."},
        "notes": {"type": "string", "description": "Internal notes, not shown to customers."},
    }


def _action(system: str, verb: str, method: str, obj: str) -> dict[str, Any]:
    plural = f"/{obj}s"
    props: dict[str, Any] = {}
    required: list[str] = []
    path = plural
    if verb in ("get", "update", "delete"):
        path = f"{plural}/{{id}}"
        props["id"] = {"type": "string", "description": f"Id of the {obj}."}
        required.append("id")
    if verb == "list":
        props.update(
            {
                "query": {"type": "string", "description": "Full-text filter."},
                "status": {"type": "string", "enum": ["active", "pending", "archived"]},
                "updated_since": {"type": "string", "format": "date-time"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
                "cursor": {"type": "string", "description": "Pagination cursor."},
            }
        )
    if verb in ("create", "update"):
        props.update(_object_fields(obj))
        if verb == "create":
            required.append("name")
    return {
        "description": f"{verb.title()} {'a ' if verb != 'list' else ''}{obj}"
        f"{'s' if verb == 'list' else ''} in the {system} system.",
        "method": method,
        "path": path,
        "access": "read" if method == "GET" else ("admin" if method == "DELETE" else "write"),
        "parameters": {"type": "object", "properties": props, "required": required},
    }


def make_http_connectors(count: int = 5, actions: int = 20) -> dict[str, HttpConnector]:
    result = {}
    for system, (description, objects) in list(_SYSTEMS.items())[:count]:
        specs = [(v, m, o) for o in objects for v, m in (*_VERBS, *_EXTRA_VERBS)][:actions]
        result[system] = HttpConnector.model_validate(
            {
                "kind": "http",
                "description": description,
                "base_url": f"https://{system}.acme.example/api",
                "actions": {f"{v}_{o}": _action(system, v, m, o) for v, m, o in specs},
            }
        )
    return result


def make_databases(root: Path, count: int = 3, tables: int = 30) -> dict[str, DatabaseConnector]:
    result = {}
    for i in range(count):
        name = ["shop_db", "analytics_db", "hr_db"][i]
        path = root / f"{name}.db"
        with sqlite3.connect(path) as conn:
            for table in _TABLE_WORDS[:tables]:
                conn.execute(
                    f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                    "status TEXT, amount NUMERIC(10, 2), created_at TIMESTAMP, "
                    "updated_at TIMESTAMP, owner_id INTEGER)"
                )
        conn.close()
        result[name] = DatabaseConnector(
            kind="database",
            description=f"{name.split('_')[0].title()} data",
            url=f"sqlite:///{path}",
        )
    return result


def connectors_section() -> list[Row]:
    """5 HTTP connectors x 20 actions and 3 SQLite databases x 30 tables."""
    from fim.connectors.provider import provide

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        connectors: dict[str, Any] = {**make_http_connectors(), **make_databases(root)}
        counts: dict[str, tuple[int, int]] = {}
        for mode in ("progressive", "legacy"):
            agent = AgentDecl(
                name="hub",
                connectors=list(connectors),
                tool_modes={"connectors": mode, "databases": mode},
            )
            snapshot = Snapshot(
                root=root, project=Project(), agents={"hub": agent}, connectors=connectors
            )
            services = Services(providers=CAPABILITIES, root=root)
            ctx = RunContext(snapshot=snapshot, agent=agent, services=services)
            provision = asyncio.run(provide(ctx))
            counts[mode] = provision_tokens(provision)
            n_tools = len(provision.tools) if provision else 0
            prompt_tok, tools_tok = counts[mode]
            print(
                f"  {mode:<11} {n_tools:>3} tools, prompt {prompt_tok:>5} tok, "
                f"tool definitions {tools_tok:>6} tok"
            )
            for key, db in list(services.cache.items()):
                if key.startswith("connector:database:"):
                    db.dispose()
    (pp, pt), (lp, lt) = counts["progressive"], counts["legacy"]
    return [
        Row("connectors", "system prompt section", pp, lp),
        Row("connectors", "tool definitions (JSON)", pt, lt),
        Row("connectors", "total first-request cost", pp + pt, lp + lt),
    ]


SECTIONS: list[Callable[[], list[Row]]] = [connectors_section]


# ------------------------------------------------------------------ skills, MCP, hub
# Built in bench/context_cost_skills.py (also runnable alone), loaded by path since bench/
# is not a package.

_SKILLS_BENCH: Any = None


def _skills_bench() -> Any:
    global _SKILLS_BENCH
    if _SKILLS_BENCH is None:
        path = Path(__file__).with_name("context_cost_skills.py")
        spec = importlib.util.spec_from_file_location("context_cost_skills", path)
        assert spec is not None and spec.loader is not None
        _SKILLS_BENCH = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_SKILLS_BENCH)
    return _SKILLS_BENCH


def skills_section() -> list[Row]:
    """10 skills of ~2,000 tokens: inline bodies vs stubs + read_skill."""
    return [Row("skills", *row) for row in _skills_bench().skills_rows()]


def mcp_section() -> list[Row]:
    """3 MCP servers x 30 tools (tool lists built in-process): every tool vs the `mcp` tool."""
    return [Row("mcp", *row) for row in _skills_bench().mcp_rows()]


def hub_section() -> list[Row]:
    """Hub agent: 10 skills, 30 builtin/connector tools, 3 MCP servers x 30 tools."""
    return [Row("hub", *row) for row in _skills_bench().hub_rows()]


SECTIONS += [skills_section, mcp_section, hub_section]


def main() -> int:
    rows: list[Row] = []
    for section in SECTIONS:
        print(f"{section.__name__}: {(section.__doc__ or '').strip().splitlines()[0]}")
        rows += section()
    print()
    print(f"{'section':<11} {'scenario':<26} {'progressive':>11} {'legacy':>8} {'reduction':>9}")
    for r in rows:
        reduction = f"{r.reduction:>8.1%}" if r.legacy else f"{'-':>8}"
        print(f"{r.section:<11} {r.scenario:<26} {r.progressive:>11} {r.legacy:>8} {reduction}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
