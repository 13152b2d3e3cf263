"""Run-time assembly of one run: services, tools, selection, context guard, delegation."""
