"""Workflows: deterministic DAGs declared in YAML, run by `WorkflowEngine`.

Import the engine from `fim.workflows.engine`; this package module stays empty so that
`fim --help` and `fim validate` never pay for the engine's imports.
"""
