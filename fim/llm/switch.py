"""The kill switch for model requests, in a leaf module so every backend can read it
without importing `fim.llm` (which loads the backends: a cycle).

While `ALLOW_MODEL_REQUESTS` is False, a request to any host but loopback raises `RunError`
(tests/conftest.py turns it off for the whole suite). `fim.llm.ALLOW_MODEL_REQUESTS` reads
and writes this same value.
"""

from __future__ import annotations

ALLOW_MODEL_REQUESTS = True
"""False refuses every model request to a non-loopback host (set by the test suite)."""
