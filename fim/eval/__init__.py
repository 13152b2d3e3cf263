"""Eval suites: run agents or workflows on cases, check assertions, report for CI."""
