"""A run's record (`GET /v1/runs/{id}`) is bounded like its event stream: while it is read
and sent it holds one of its key's follower places (16, the places of `GET
/v1/runs/{id}/events`), so past them it is a 429 naming the limit while another key still
reads its runs; and it carries at most a MiB of the run's events (tokens left out), with
`events_cut` saying where they stop and `GET /v1/runs/{id}/events?after=<seq>` sending the
rest. Before, one answer of a run with a 3.8 MB output was 11.7 MB, uncounted: 300 that
were never read took a server to 3.5 GB and another key's 6 ms run to 58 s (attack-56 F2).
`fim runs show` reads its own store and still gets every event of a run."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.server.app import create_app
from fim.server.http import key_owner
from fim.server.limits import FOLLOWERS_PER_OWNER
from fim.server.live_routes import RECORD_EVENT_BYTES
from fim.server.responses import RunDetail
from fim.store import Store
from fim.store.live import EventLog, read_events
from fim.testing.cluster import sse_frames
from fim.testing.server import ServerThread

A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}
LONG = "x" * (RECORD_EVENT_BYTES + 1000)  # one answer past the bound


def write_project(root: Path) -> Path:
    files = {
        "fim.yaml": (
            'name: record\nstate: "sqlite:///.fim/state.db"\nserver: {api_keys: [key-a, key-b]}\n'
        ),
        "agents/quick.yaml": "description: says hi\nmodel: scripted:quick.script.yaml\n",
        "quick.script.yaml": '- text: "hi"\n',
        "agents/long.yaml": "description: answers at length\nmodel: scripted:long.script.yaml\n",
        "long.script.yaml": f'- text: "{LONG}"\n',
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    app = create_app(SnapshotHolder(compile_project(write_project(tmp_path))))
    with ServerThread(app) as srv:
        yield srv.url, app.state.api


def run(url: str, agent: str, headers: dict[str, str]) -> str:
    done = httpx.post(f"{url}/v1/agents/{agent}/runs", json={"input": "x"}, headers=headers)
    assert done.status_code == 200, done.text
    return str(done.json()["run_id"])


def test_reading_a_run_record_takes_one_of_the_keys_follower_places(served: tuple[str, Any]):
    url, api = served
    owner = key_owner(b"key-a")
    mine, theirs = run(url, "quick", A), run(url, "quick", B)

    answer = httpx.get(f"{url}/v1/runs/{mine}", headers=A)
    assert answer.status_code == 200 and answer.json()["data"]["events"]
    assert api.limits.following(owner) == 0  # given back once the answer was sent

    places = [api.limits.follow(owner) for _ in range(FOLLOWERS_PER_OWNER)]
    over = httpx.get(f"{url}/v1/runs/{mine}", headers=A)
    assert over.status_code == 429, over.text
    assert over.headers["Retry-After"].isdigit()
    problem = over.json()["error"]
    assert problem["code"] == "rate_limit_exceeded"
    assert f"already follows {FOLLOWERS_PER_OWNER}" in problem["message"]
    assert "GET /v1/runs/{id}" in problem["message"]

    assert httpx.get(f"{url}/v1/runs/{theirs}", headers=B).status_code == 200  # another key
    places[0].release()
    assert httpx.get(f"{url}/v1/runs/{mine}", headers=A).status_code == 200
    assert api.limits.following(owner) == FOLLOWERS_PER_OWNER - 1
    for place in places:
        place.release()


def test_a_refused_or_unknown_record_keeps_no_place(served: tuple[str, Any]):
    url, api = served
    theirs = run(url, "quick", B)
    assert httpx.get(f"{url}/v1/runs/{theirs}", headers=A).status_code == 404
    assert httpx.get(f"{url}/v1/runs/nope", headers=A).status_code == 404
    assert api.limits.following(key_owner(b"key-a")) == 0


def test_a_whole_trace_has_no_cut(served: tuple[str, Any]):
    url, _api = served
    body = httpx.get(f"{url}/v1/runs/{run(url, 'quick', A)}", headers=A).json()
    RunDetail.model_validate(body)
    assert "events_cut" not in body
    assert [e["type"] for e in body["data"]["events"]][-1] == "run_finished"


def test_a_trace_past_a_mib_stops_there_and_points_to_the_rest(served: tuple[str, Any]):
    url, _api = served
    run_id = run(url, "long", A)
    answer = httpx.get(f"{url}/v1/runs/{run_id}", headers=A)
    body = answer.json()
    detail = RunDetail.model_validate(body)
    assert detail.events_cut is not None
    cut = detail.events_cut
    kept = body["data"]["events"]
    assert kept and all(e["type"] not in {"run_finished", "token"} for e in kept)
    assert sum(len(json.dumps(e).encode()) for e in kept) <= RECORD_EVENT_BYTES
    assert cut.max_bytes == RECORD_EVENT_BYTES
    assert cut.rest == f"/v1/runs/{run_id}/events?after={cut.after}"
    assert cut.rest in cut.message
    assert len(answer.content) < 3 * len(LONG)  # the output once in the record, not thrice

    rest = httpx.get(f"{url}{cut.rest}", headers=A)
    frames = list(sse_frames(iter(rest.text.splitlines())))
    assert int(frames[0][0]) == cut.after + 1
    assert frames[-1][1]["type"] == "run_finished" and frames[-1][1]["output"] == LONG


def test_the_cli_reads_every_event_of_a_long_run(tmp_path: Path):
    async def check() -> None:
        store = Store(f"sqlite:///{tmp_path / 'state.db'}")
        log = EventLog(store, "r", "agent", "a", record=False)
        for i in range(2500):
            log.add({"type": "tool_result", "run_id": "r", "output": str(i)})
        log.add({"type": "run_finished", "run_id": "r", "output": "end"})
        await log.close()
        events = [event for _seq, event in await read_events(store, "r")]
        assert len(events) == 2501 and events[-1]["type"] == "run_finished"
        assert len(await read_events(store, "r", limit=10)) == 10
        store.close()

    asyncio.run(check())
