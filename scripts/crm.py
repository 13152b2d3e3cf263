"""The example project's CRM: a small HTTP service on 127.0.0.1:8081 (connectors/crm.yaml).

    python scripts/crm.py            # serves until Ctrl-C; --port to move it (then set CRM_URL)

Contacts and orders are read from data/shop.db (the shop database of connectors/shop_db.yaml)
when it starts, so both connectors tell the same story; leads and refunds live in memory
and are gone when it stops. Every request needs `Authorization: Bearer <CRM_TOKEN>`
(default `demo-token`, the connector's default too). It is a demo service, not part of fim.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

Handler = Callable[[Request], Awaitable[JSONResponse]]
DB = Path(__file__).resolve().parent.parent / "data" / "shop.db"


def load(db: Path = DB) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Contacts and orders (with their items) by id, as strings: what the CRM serves."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        conn.row_factory = sqlite3.Row
        contacts = {str(r["id"]): dict(r) for r in conn.execute("SELECT * FROM customers")}
        orders = {str(r["id"]): dict(r) for r in conn.execute("SELECT * FROM orders")}
        for item in conn.execute("SELECT * FROM order_items"):
            orders[str(item["order_id"])].setdefault("items", []).append(dict(item))
    return contacts, orders


def create_app(db: Path = DB, token: str | None = None) -> Starlette:
    contacts, orders = load(db)
    expected = f"Bearer {token or os.environ.get('CRM_TOKEN') or 'demo-token'}"
    leads: list[dict[str, Any]] = []
    refund_ids = itertools.count(1)

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    def authorised(request: Request) -> bool:
        return request.headers.get("authorization") == expected

    async def get_contact(request: Request) -> JSONResponse:
        contact = contacts.get(request.path_params["id"])
        return JSONResponse(contact) if contact else error(404, "no such contact")

    async def search_contacts(request: Request) -> JSONResponse:
        q = request.query_params.get("q", "").lower()
        try:
            limit = min(int(request.query_params.get("limit", 20)), 100)
        except ValueError:
            return error(400, "limit must be an integer")
        found = [c for c in contacts.values() if q in c["name"].lower() or q in c["email"]]
        return JSONResponse(found[:limit])

    async def create_lead(request: Request) -> JSONResponse:
        body = await request.json()
        if not isinstance(body, dict) or not body.get("name"):
            return error(400, "name is required")
        lead = {"id": f"L{len(leads) + 1}", "name": body["name"], "email": body.get("email")}
        leads.append(lead)
        return JSONResponse(lead, status_code=201)

    async def get_order(request: Request) -> JSONResponse:
        order = orders.get(request.path_params["id"])
        return JSONResponse(order) if order else error(404, "no such order")

    async def refund_order(request: Request) -> JSONResponse:
        order = orders.get(request.path_params["id"])
        if order is None:
            return error(404, "no such order")
        if order["status"] not in ("delivered", "shipped"):
            return error(409, f"order {order['id']} is {order['status']}; it cannot be refunded")
        body = await request.json() if await request.body() else {}
        order["status"] = "refunded"
        return JSONResponse(
            {
                "refund_id": f"R{next(refund_ids)}",
                "order_id": order["id"],
                "amount": order["amount"],
                "status": "refunded",
                "reason": (body or {}).get("reason", ""),
            }
        )

    def guarded(handler: Handler) -> Handler:
        async def endpoint(request: Request) -> JSONResponse:
            if not authorised(request):
                return error(401, "missing or wrong bearer token (CRM_TOKEN)")
            return await handler(request)

        return endpoint

    routes = [
        Route("/contacts/{id}", guarded(get_contact)),
        Route("/contacts", guarded(search_contacts)),
        Route("/leads", guarded(create_lead), methods=["POST"]),
        Route("/orders/{id}", guarded(get_order)),
        Route("/orders/{id}/refund", guarded(refund_order), methods=["POST"]),
    ]
    return Starlette(routes=routes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8081)
    args = parser.parse_args()
    import uvicorn

    print(f"example CRM on http://127.0.0.1:{args.port} (token: CRM_TOKEN or demo-token)")
    uvicorn.run(create_app(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
