"""Test doubles shipped with fim: a model endpoint, hook, connector, workflow and server helpers."""
