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
WITH me AS (SELECT r.oid, r.rolname FROM pg_catalog.pg_roles r WHERE r.rolname = current_user),
roles AS (SELECT g.oid, g.rolname::text AS name, g.rolsuper, g.rolcreaterole, g.rolcreatedb
          FROM pg_catalog.pg_roles g, me WHERE pg_catalog.pg_has_role(me.oid, g.oid, 'MEMBER'))
SELECT me.rolname::text, pg_catalog.current_database(),
  ARRAY(SELECT name FROM roles WHERE rolsuper ORDER BY 1),
  ARRAY(SELECT name FROM roles WHERE rolcreaterole ORDER BY 1),
  ARRAY(SELECT name FROM roles WHERE rolcreatedb ORDER BY 1),
  EXISTS(SELECT 1 FROM roles
         WHERE pg_catalog.has_database_privilege(roles.oid, pg_catalog.current_database(),
                                                 'CREATE')),
  ARRAY(SELECT name FROM roles WHERE name = ANY(%(roles)s) ORDER BY 1),
  ARRAY(SELECT n.nspname::text FROM pg_catalog.pg_namespace n
        WHERE n.nspname <> ALL(%(system)s) AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          AND EXISTS(SELECT 1 FROM roles
                     WHERE pg_catalog.has_schema_privilege(roles.oid, n.oid, 'CREATE'))
        ORDER BY 1 LIMIT 3),
  ARRAY(SELECT pg_catalog.format('%%I.%%I', n.nspname, c.relname)
        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname <> ALL(%(system)s) AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          AND EXISTS(SELECT 1 FROM roles WHERE
               (c.relkind IN ('r', 'p', 'v', 'm', 'f')
                AND (pg_catalog.has_table_privilege(roles.oid, c.oid,
                       'INSERT, UPDATE, DELETE, TRUNCATE')
                     OR pg_catalog.has_any_column_privilege(roles.oid, c.oid, 'INSERT, UPDATE')))
               OR (c.relkind = 'S'
                   AND pg_catalog.has_sequence_privilege(roles.oid, c.oid, 'USAGE, UPDATE')))
        ORDER BY 1 LIMIT 3)
FROM me
"""
"""What the connector's role, and every role it may become (`SET ROLE`: a member of it,
NOINHERIT included), could do that a reader must not. Privileges a NOINHERIT membership
does not pass on are still one `SET ROLE` away (attack-49 F1): each role counts."""


class ReadOnlyRoleError(RuntimeError):
    """A read-only PostgreSQL connector whose role could write: it is not used at all."""


def role_problems(conn: Any) -> tuple[str, str, list[str]]:
    """(role, database, what the role could do that a reader must not); `conn` is psycopg."""
    row = conn.execute(
        _ROLE_SQL, {"roles": list(WRITE_ROLES), "system": sorted(TRUSTED_SCHEMAS)}
    ).fetchone()
    if row is None:
        return "?", "?", ["its role could not be found in pg_roles"]
    role, database, supers, createroles, createdbs, create_db, roles, schemas, rels = row
    if role in supers:  # a superuser is a member of everything: one reason is enough
        return role, database, ["is a superuser"]
    if supers:  # as good as one
        return role, database, [f"can become {_names(supers)} (SET ROLE), a superuser"]
    problems: list[str] = []
    for names, what in ((createroles, "CREATEROLE"), (createdbs, "CREATEDB")):
        if role in names:
            problems.append(f"has {what}")
        elif names:
            problems.append(f"can become {_names(names)} (SET ROLE), which has {what}")
    if roles:
        problems.append(f"is a member of {', '.join(roles)}")
    if create_db:
        problems.append(f"has CREATE on database {database}")
    if schemas:
        problems.append(f"has CREATE on schema {', '.join(schemas)}")
    if rels:
        problems.append(f"can write to {', '.join(rels)}")
    return role, database, problems


def _names(roles: list[str]) -> str:
    return ", ".join(f"'{name}'" for name in roles[:3]) + (" ..." if len(roles) > 3 else "")


def role_error(connector: str, role: str, database: str, problems: list[str]) -> str:
    """The one line that says what is wrong with the role and how to make a reader."""
    return (
        f"read-only connector '{connector}' connects as role '{role}', which "
        f"{'; '.join(problems)}, so read-only would rest on the SQL parser alone; "
        f"{ROLE_HINT.format(db=database)}"
    )
