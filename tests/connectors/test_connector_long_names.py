"""A connector action whose `{connector}__{action}` is over 64 characters (attack-52 F2).

The model calls it by a shortened name (54 characters and a digest of the whole), and hook
matchers are tried against that name and the full one, as for MCP tools
(tests/mcp/test_mcp_long_names.py): a guard written with the declared name, or with a glob on
the tail the shortened name loses, blocks the legacy tool and the `connector` meta-tool's
`execute` alike. The action is real: it reaches the test service, which counts each hit.
"""

from __future__ import annotations

from typing import Any

import pytest

from fim.config.schema import HttpConnector
from fim.connectors import http_fetch
from fim.connectors.http import get_client
from fim.connectors.http_tool import action_tool, tool_name
from fim.connectors.meta import ConnectorMetaTool
from fim.hooks import HookResult, PreToolUseHook
from fim.hooks.runner import HookChain
from fim.run.services import Services
from fim.testing.connectors import serve_test_api
from fim.testing.hooks import call_tool
from fim.types import HookContext

ACTION = "records_maintenance_and_housekeeping_operations_permanently_delete_all"
FULL = f"crm__{ACTION}"


class Refuse(PreToolUseHook):
    async def __call__(self, context: HookContext) -> HookResult:
        return HookResult(allow=False, error="records are not deleted here")


def refuse(matcher: str) -> HookChain:
    hook = Refuse()
    hook.set_matcher(matcher)
    return HookChain([hook])


@pytest.fixture(scope="module")
def api():
    with serve_test_api() as served:
        yield served


@pytest.fixture
async def services():
    svc = Services()
    yield svc
    await svc.aclose()


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_fetch, "RETRY_BACKOFF", 0.01)


def routes(services: Services, url: str, key: str) -> dict[str, tuple[Any, dict[str, Any]]]:
    """The two ways a model calls the action: its legacy tool, and `connector execute`."""
    decl = HttpConnector.model_validate(
        {"kind": "http", "base_url": url, "actions": {ACTION: {"path": f"/flaky/{key}"}}}
    )
    client = get_client(services, "crm", decl)
    execute = {"subcommand": "execute", "connector": "crm", "action": ACTION, "parameters": {}}
    return {
        "legacy": (action_tool(client, ACTION), {}),
        "progressive": (ConnectorMetaTool([client]), execute),
    }


@pytest.mark.parametrize("route", ["legacy", "progressive"])
@pytest.mark.parametrize("matcher", [FULL, "crm__*delete_all", "re:_delete_all$"])
async def test_a_hook_on_the_full_name_or_its_tail_blocks_the_action(
    api, services, route: str, matcher: str
) -> None:
    url, _, state = api
    key = f"{route}-{len(matcher)}"
    tool, args = routes(services, url, key)[route]

    outcome = await call_tool(refuse(matcher), tool, args)

    assert outcome.blocked and not outcome.ran
    assert "records are not deleted here" in outcome.observation
    assert state.hits.get(key, 0) == 0, "the action must not have reached the service"
    assert len(tool_name("crm", ACTION)) == 64, "the model calls it by a shortened name"
    # the same call under a hook on another name reaches the service
    assert (await call_tool(refuse("crm__*delete_one"), tool, args)).ran
    assert state.hits[key] >= 1


@pytest.mark.parametrize("matcher", [FULL, "re:_h[0-9a-f]{8}$", "shortened"])
def test_validate_takes_a_matcher_on_the_shortened_or_the_full_name(
    tmp_path: Any, matcher: str
) -> None:
    """`fim validate` judged matchers against full names only: one on the name a model calls
    (what `fim show connector` lists, and what hooks see) was said to match no tool."""
    import dataclasses

    from fim.hooks import check_hooks
    from fim.testing.hooks import make_context

    matcher = tool_name("crm", ACTION) if matcher == "shortened" else matcher
    ctx = make_context(
        tmp_path,
        [{"event": "PreToolUse", "command": "true", "matcher": matcher}],
        agent={"connectors": ["crm"]},
    )
    crm = HttpConnector.model_validate(
        {
            "name": "crm",
            "kind": "http",
            "base_url": "http://127.0.0.1:1",
            "actions": {ACTION: {"method": "DELETE", "path": "/records"}},
        }
    )
    assert check_hooks(dataclasses.replace(ctx.snapshot, connectors={"crm": crm})) == []
