"""Workflows: deterministic DAGs declared in YAML, run by `WorkflowEngine`.

Import the engine from `fim.workflows.engine`; this package module imports nothing but the
config schema, so that `fim --help` and `fim validate` never pay for the engine's imports.
The schema comes first because the node types (`fim.workflows.node_types`) are part of it:
`fim.config.schema` builds its node union from them, so it must be the one to load them.
"""

import fim.config.schema  # noqa: F401  (before node_types: see above)
