"""How an A2A client discovers a keyed fim server (newcomer-54 #10), with the a2a-sdk's own
card resolver (no headers) against a real uvicorn:

- the agent cards (the project's, each agent's) are served without a key: they describe and
  run nothing, and the SDK's `create_client(URL)` failed on them with HTTP 401 before any
  call; the JSON-RPC endpoints still need the key;
- on a server with keys each card declares a bearer `securitySchemes` entry and requires it
  (A2A 1.0 `securityRequirements`, the 0.3 `security` the SDK adds), so a client learns it
  must send `Authorization: Bearer`; an open server's cards declare none;
- the project card's endpoint is `auto` only when `auto` can run: when its model has no API
  key it is the one agent that can, or, with none or several, the card's description says
  so and names the agents' cards; the description names no model nor variable.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("a2a", reason="a2a-sdk is not installed (pip install 'fim[a2a]')")

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.types import a2a_pb2 as pb

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.server.a2a_cards import agent_card
from fim.server.app import create_app
from fim.testing.server import ServerThread

KEY = "cards-k3y-5454"
CARD = "/.well-known/agent-card.json"
SCRIPT = '- text: "42"\n'
SCRIPTED = "model: scripted:answer.yaml\ntools: [calculator]\n"
NEEDS_KEY = "model: openai/gpt-4o-mini\n"  # no OPENAI_API_KEY in these tests


@pytest.fixture(autouse=True)
def no_openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def project(root: Path, agents: dict[str, str], server: str = "") -> Snapshot:
    files = {
        "fim.yaml": (
            f'name: shop\nstate: "sqlite:///.fim/state.db"\n{server}'
            "models:\n  general: {model: openai/gpt-4o-mini}\n"
        ),
        "answer.yaml": SCRIPT,
        **{f"agents/{name}.yaml": text for name, text in agents.items()},
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return compile_project(root)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A keyed server whose `auto` cannot run (the general model has no key) and whose one
    runnable agent is `math` (`writer` has no key either)."""
    root = tmp_path_factory.mktemp("cards54")
    snapshot = project(
        root, {"math": SCRIPTED, "writer": NEEDS_KEY}, f"server: {{api_keys: [{KEY}]}}\n"
    )
    with ServerThread(create_app(SnapshotHolder(snapshot))) as srv:
        yield srv.url


def resolve(url: str, path: str = CARD) -> pb.AgentCard:
    """The card as the a2a-sdk resolves it: no headers, as `create_client(URL)` asks."""

    async def go() -> pb.AgentCard:
        async with httpx.AsyncClient() as http:
            return await A2ACardResolver(http, url).get_agent_card(relative_card_path=path)

    return asyncio.run(go())


def asks_for_a_bearer_key(card: pb.AgentCard) -> bool:
    scheme = card.security_schemes["bearer"].http_auth_security_scheme
    required = [set(r.schemes) for r in card.security_requirements]
    return scheme.scheme == "bearer" and required == [{"bearer"}]


def send(card: pb.AgentCard, text: str, key: str | None = KEY) -> list[Any]:
    async def go() -> list[Any]:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with httpx.AsyncClient(headers=headers, timeout=30) as http:
            client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
            message = pb.Message(
                role=pb.Role.ROLE_USER, parts=[pb.Part(text=text)], message_id=uuid.uuid4().hex
            )
            return [r async for r in client.send_message(pb.SendMessageRequest(message=message))]

    return asyncio.run(go())


def test_the_sdk_resolves_every_card_of_a_keyed_server_without_a_key(keyed: str):
    project_card, math = resolve(keyed), resolve(keyed, f"/a2a/math{CARD}")
    assert project_card.name == "shop" and [s.id for s in project_card.skills] == [
        "math",
        "writer",
    ]
    assert math.name == "math" and math.supported_interfaces[0].url == f"{keyed}/a2a/math"
    assert httpx.get(f"{keyed}/a2a/ghost{CARD}").status_code == 404  # still the route's answer
    # read by anyone: a skill names its agent, not the tools behind it
    assert [list(s.tags) for s in math.skills] == [["math"]]


def test_a_keyed_servers_cards_declare_the_bearer_scheme_in_both_protocol_versions(keyed: str):
    assert asks_for_a_bearer_key(resolve(keyed))
    assert asks_for_a_bearer_key(resolve(keyed, f"/a2a/writer{CARD}"))
    raw = httpx.get(f"{keyed}/a2a/math{CARD}").json()
    assert raw["securityRequirements"] == [{"schemes": {"bearer": {}}}]  # A2A 1.0
    assert raw["security"] == [{"bearer": []}]  # A2A 0.3
    assert raw["securitySchemes"]["bearer"]["type"] == "http"
    assert raw["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_the_endpoints_a_card_names_still_need_the_key(keyed: str):
    math = resolve(keyed, f"/a2a/math{CARD}")
    with pytest.raises(A2AClientError, match="HTTP Error 401"):
        send(math, "6*7?", key=None)
    state = send(math, "6*7?")[0].task.status.state
    assert state == pb.TaskState.TASK_STATE_COMPLETED
    ask = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {}}
    assert httpx.post(f"{keyed}/a2a/math", json=ask).status_code == 401


def test_the_project_card_sends_clients_to_the_one_agent_that_can_run(keyed: str):
    card = resolve(keyed)
    assert {i.url for i in card.supported_interfaces} == {f"{keyed}/a2a/math"}
    assert "'auto' agent" in card.description and "cannot run on this server" in card.description
    assert "gpt-4o-mini" not in card.description and "OPENAI" not in card.description
    answer = send(card, "6*7?")[0].task  # a client following the card gets its answer
    assert answer.status.state == pb.TaskState.TASK_STATE_COMPLETED
    assert "".join(p.text for a in answer.artifacts for p in a.parts) == "42"


def test_with_several_agents_that_can_run_the_description_names_their_cards(tmp_path: Path):
    snapshot = project(tmp_path, {"math": SCRIPTED, "tax": SCRIPTED, "writer": NEEDS_KEY})
    card = agent_card(snapshot, "http://fim.test/", None)
    assert card.supported_interfaces[0].url == "http://fim.test/a2a/auto"  # no single choice
    assert card.description.endswith(
        "use the card of an agent that can: "
        f"http://fim.test/a2a/math{CARD}, http://fim.test/a2a/tax{CARD}."
    )
    assert "writer" not in card.description


def test_with_no_agent_that_can_run_the_description_says_so(tmp_path: Path):
    snapshot = project(tmp_path, {"writer": NEEDS_KEY, "editor": NEEDS_KEY})
    card = agent_card(snapshot, "http://fim.test", None)
    assert card.description.endswith("(its model has no API key), nor can any agent.")


def test_when_auto_can_run_the_project_card_is_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    snapshot = project(tmp_path, {"math": SCRIPTED, "writer": NEEDS_KEY})
    card = agent_card(snapshot, "http://fim.test", None)
    assert card.supported_interfaces[0].url == "http://fim.test/a2a/auto"
    assert card.description == "fim project 'shop'"


def test_an_open_servers_cards_declare_no_scheme(tmp_path: Path):
    snapshot = project(tmp_path, {"math": SCRIPTED})
    for name in (None, "math"):
        card = agent_card(snapshot, "http://fim.test", name)
        assert not card.security_schemes and not card.security_requirements
        assert [list(s.tags) for s in card.skills] == [["calculator"]]  # only key holders


def test_only_the_card_paths_are_open(keyed: str):
    for path in (f"/a2a/math/x{CARD}", f"/a2a{CARD}", "/a2a/math/.well-known/other.json"):
        assert httpx.get(keyed + path).status_code == 401, path


def test_the_api_description_lists_the_cards_as_needing_no_key(keyed: str):
    paths = httpx.get(f"{keyed}/openapi.json").json()["paths"]
    for path in (CARD, "/a2a/{agent}" + CARD):
        assert paths[path]["get"]["security"] == [] and "401" not in paths[path]["get"]["responses"]
    assert "security" not in paths["/a2a/{agent}"]["post"]  # the document's default: a key
