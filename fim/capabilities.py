"""The capability areas a run is assembled from, composed where a process is put together.

Every surface that builds a `fim.run.services.Services` (CLI commands, the server, its
workers, `fim worker`, eval) hands it this list. It lives up here, not beside `Services`,
because two of the areas run agents themselves (delegation asks another agent, the
workflow tool starts a workflow whose nodes ask agents): a list in the run layer would make
the run import what imports the run. A new area is one `provide(ctx) -> Provision`
function and one line here; a path that fails to import fails the run, it is never skipped.
"""

from __future__ import annotations

CAPABILITIES: tuple[str, ...] = (
    "fim.tools.builtin:provide",
    "fim.run.project_tools:provide",
    "fim.connectors:provide",
    "fim.mcp:provide",
    "fim.run.skills:provide",
    "fim.workflows.tool:provide",
    "fim.run.delegation:provide",
)
"""`module:function` paths, in the order their tools and prompt sections appear."""
