"""What the read-only guard refuses in every dialect, and what it reports back.

The names of functions with side effects and the PRAGMAs that only read are shared by both
parsers (`sqlglot_dialects`, `postgres`), by the catalog check and by SQLite's authorizer in
`fim.connectors.readonly`: one list, so no layer can allow what another refuses. `Parsed` is
what an accepted statement hands to the layers after it; `SqlRejected` is every refusal.
"""

from __future__ import annotations

from dataclasses import dataclass

_SIDE_EFFECT_FUNCTIONS = frozenset(
    {
        # PostgreSQL: server control, sequences, settings, large objects, files, notify
        "pg_terminate_backend",
        "pg_cancel_backend",
        "pg_reload_conf",
        "pg_rotate_logfile",
        "pg_promote",
        "pg_sleep",
        "pg_sleep_for",
        "pg_sleep_until",
        "pg_export_snapshot",
        "pg_log_backend_memory_contexts",
        "currval",
        "lastval",
        "set_config",
        "nextval",
        "setval",
        "txid_current",
        "pg_current_xact_id",
        "pg_notify",
        "lo_import",
        "lo_export",
        "lo_unlink",
        "lo_create",
        "lo_creat",
        "lo_put",
        "lo_from_bytea",
        "lowrite",
        "query_to_xml",
        "query_to_xml_and_xmlschema",
        "query_to_xmlschema",
        "cursor_to_xml",
        "cursor_to_xmlschema",
        "ts_stat",
        "ts_rewrite",
        "pg_import_system_collations",
        # SQLite: extension loading and the CLI's file functions
        "load_extension",
        "writefile",
        "readfile",
        "edit",
        "fts3_tokenizer",
        # MySQL
        "sleep",
        "benchmark",
        "get_lock",
        "release_lock",
        "load_file",
    }
)
_SIDE_EFFECT_PREFIXES = (
    "dblink",
    "lo_",
    "pg_advisory",
    "pg_try_advisory",
    "pg_stat_reset",
    "pg_replication",
    "pg_logical",
    "pg_create",
    "pg_drop",
    "pg_switch",
    "pg_file",
    "pg_read",
    "pg_ls_",
    "pg_stat_file",
    "pg_backup",
    "pg_start_backup",
    "pg_stop_backup",
    "pg_wal_replay",
    "pg_copy",
    "pg_terminate",
    "pg_cancel",
    "pg_sleep",
    "table_to_xml",
    "schema_to_xml",
    "database_to_xml",
    "query_to_xml",
)

READ_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "database_list",
        "collation_list",
        "function_list",
        "module_list",
        "pragma_list",
        "compile_options",
        "user_version",
        "schema_version",
        "application_id",
        "page_count",
        "page_size",
        "encoding",
        "freelist_count",
        "journal_mode",
        "read_uncommitted",
        "integrity_check",
        "quick_check",
        "foreign_key_check",
    }
)
"""PRAGMAs that only read when given no value."""
ARGUMENT_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "foreign_key_check",
        "integrity_check",
        "quick_check",
    }
)
"""PRAGMAs whose argument names a table or limit rather than a new value."""


class SqlRejected(ValueError):
    """A statement the read-only guard refuses; the message is written for the model."""


Name = tuple[str, ...]
"""A possibly schema-qualified name exactly as the parser resolved it (`('pg_catalog',
'lower')`, or `('lower',)`): unquoted parts case-folded, quoted parts and U& escapes
decoded."""


@dataclass(frozen=True)
class Parsed:
    """What the static check learnt about an accepted statement."""

    sql: str
    """The text to execute. For PostgreSQL, `:name` placeholders are rewritten to `$n`
    and this exact text is what was parsed, so what runs is what was checked."""
    params: tuple[str, ...] = ()
    """Placeholder names in `$1, $2, ...` order (PostgreSQL)."""
    kind: str = "select"
    functions: frozenset[Name] = frozenset()
    operators: frozenset[Name] = frozenset()
    types: frozenset[Name] = frozenset()
    statement: str = ""
    """PostgreSQL: the statement alone, as far as the parser found it (no trailing `;` nor
    a comment after one), so fim can nest it in a query of its own (`SELECT ... FROM
    (statement)`) without a `;` breaking the syntax. Empty when that is all of `sql` (and
    for other dialects), so a memoised decision does not hold the text twice."""


def is_side_effect_function(name: str) -> bool:
    """True for functions that write, signal, sleep the server or touch its files."""
    lowered = name.lower()
    return lowered in _SIDE_EFFECT_FUNCTIONS or lowered.startswith(_SIDE_EFFECT_PREFIXES)
