"""A PostgreSQL schema of a test's own in the server FIM_TEST_POSTGRES_URL names: the one
way the suite gets a fresh, empty state store on PostgreSQL (dropped after the test)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def pg_schema(prefix: str = "fim_test") -> Iterator[str]:
    """A state URL whose `search_path` is a new schema `<prefix>_<hex>`, dropped on exit;
    the test is skipped when FIM_TEST_POSTGRES_URL is not set."""
    server = os.environ.get("FIM_TEST_POSTGRES_URL")
    if not server:
        pytest.skip("FIM_TEST_POSTGRES_URL is not set")
    # deferred: psycopg is a dev extra, loaded only by the PostgreSQL tests
    import psycopg

    conninfo = server.replace("postgresql+psycopg://", "postgresql://")
    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in server else "?"
    try:
        yield f"{server}{sep}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
