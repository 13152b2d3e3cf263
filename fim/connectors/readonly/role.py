"""Layer 3 of read-only PostgreSQL: the connector's role must not be able to write.

Checked on the first connect, so a read-only connector never rests on the SQL parser alone:
a superuser, a role with CREATEROLE/CREATEDB, a member of the `pg_write_*`/server-file/signal
roles, or one that may create objects or write to a table or sequence is refused, with the
SQL that makes a reader instead.
"""

from __future__ import annotations

from typing import Any

from fim.connectors.readonly.catalog import TRUSTED_SCHEMAS

WRITE_ROLES = (
    "pg_write_all_data",
    "pg_write_server_files",
    "pg_execute_server_program",
    "pg_read_server_files",
    "pg_signal_backend",
)
"""Predefined roles a read-only connector's role must not be a member of."""
ROLE_HINT = (
    "create a read-only role: CREATE ROLE fim_reader LOGIN PASSWORD '...'; "
    "GRANT CONNECT ON DATABASE {db} TO fim_reader; GRANT USAGE ON SCHEMA public TO fim_reader; "
    "GRANT SELECT ON ALL TABLES IN SCHEMA public TO fim_reader; and put fim_reader in the "
    "connector's url"
)


_ROLE_SQL = """
SELECT r.rolname, r.rolsuper, r.rolcreaterole, r.rolcreatedb, pg_catalog.current_database(),
  pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CREATE'),
  ARRAY(SELECT g.rolname::text FROM pg_catalog.pg_roles g
        WHERE g.rolname = ANY(%(roles)s) AND pg_catalog.pg_has_role(r.oid, g.oid, 'MEMBER')
        ORDER BY 1),
  ARRAY(SELECT n.nspname::text FROM pg_catalog.pg_namespace n
        WHERE n.nspname <> ALL(%(system)s) AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          AND pg_catalog.has_schema_privilege(r.oid, n.oid, 'CREATE')
        ORDER BY 1 LIMIT 3),
  ARRAY(SELECT pg_catalog.format('%%I.%%I', n.nspname, c.relname)
        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname <> ALL(%(system)s) AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          AND ((c.relkind IN ('r', 'p', 'v', 'm', 'f')
                AND (pg_catalog.has_table_privilege(r.oid, c.oid,
                       'INSERT, UPDATE, DELETE, TRUNCATE')
                     OR pg_catalog.has_any_column_privilege(r.oid, c.oid, 'INSERT, UPDATE')))
               OR (c.relkind = 'S'
                   AND pg_catalog.has_sequence_privilege(r.oid, c.oid, 'USAGE, UPDATE')))
        ORDER BY 1 LIMIT 3)
FROM pg_catalog.pg_roles r WHERE r.rolname = current_user
"""


class ReadOnlyRoleError(RuntimeError):
    """A read-only PostgreSQL connector whose role could write: it is not used at all."""


def role_problems(conn: Any) -> tuple[str, str, list[str]]:
    """(role, database, what the role could do that a reader must not); `conn` is psycopg."""
    row = conn.execute(
        _ROLE_SQL, {"roles": list(WRITE_ROLES), "system": sorted(TRUSTED_SCHEMAS)}
    ).fetchone()
    if row is None:
        return "?", "?", ["its role could not be found in pg_roles"]
    role, superuser, createrole, createdb, database, create_db, roles, schemas, rels = row
    if superuser:  # a superuser is a member of everything: one reason is enough
        return role, database, ["is a superuser"]
    problems: list[str] = []
    if createrole:
        problems.append("has CREATEROLE")
    if createdb:
        problems.append("has CREATEDB")
    if roles:
        problems.append(f"is a member of {', '.join(roles)}")
    if create_db:
        problems.append(f"has CREATE on database {database}")
    if schemas:
        problems.append(f"has CREATE on schema {', '.join(schemas)}")
    if rels:
        problems.append(f"can write to {', '.join(rels)}")
    return role, database, problems


def role_error(connector: str, role: str, database: str, problems: list[str]) -> str:
    """The one line that says what is wrong with the role and how to make a reader."""
    return (
        f"read-only connector '{connector}' connects as role '{role}', which "
        f"{'; '.join(problems)}, so read-only would rest on the SQL parser alone; "
        f"{ROLE_HINT.format(db=database)}"
    )
