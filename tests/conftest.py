"""Suite-wide safety: no test can reach a real (paid) model.

`fim.llm.ALLOW_MODEL_REQUESTS = False` makes every model backend refuse a request to any
host but loopback, so tests use `fim.llm.testing.ScriptedModel` or an `OpenAIStubServer`
on 127.0.0.1. litellm, if a test imports it, reads its bundled price map instead of
downloading one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture(autouse=True, scope="session")
def _no_model_requests() -> Iterator[None]:
    import fim.llm

    previous = fim.llm.ALLOW_MODEL_REQUESTS
    fim.llm.ALLOW_MODEL_REQUESTS = False
    yield
    fim.llm.ALLOW_MODEL_REQUESTS = previous
