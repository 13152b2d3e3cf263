"""Following a run's events (`GET /v1/runs/{id}/events`) counts under the caller's key:
a key (one tenant; every caller together on a server without keys) may have 16 streams
open at once, or its `server.key_limits.max_parallel_runs` when that is more. Past that a
new one is a 429 in the shape of the other key limits, naming the limit, while another key
still follows its runs; a stream's place comes back when its client closes it. Counted
whether `key_limits` is set or not, like a key's MCP sessions: 300 followers that never
read one run took a server from 199 MB to 4.6 GB and another key's 5 ms run to 22 s, with
no 429 (attack-55 F1)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.config.schema import KeyLimits
from fim.server.app import create_app
from fim.server.http import key_owner
from fim.server.limits import FOLLOWERS_PER_OWNER, Busy, KeyLimiter, followers_cap
from fim.testing.cluster import sse_frames, until
from fim.testing.server import ServerThread

A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}


def write_project(root: Path) -> Path:
    files = {
        "fim.yaml": (
            'name: follow\nstate: "sqlite:///.fim/state.db"\n'
            "server: {api_keys: [key-a, key-b]}\n"  # no key_limits: followers count anyway
        ),
        "agents/quick.yaml": "description: says hi\nmodel: scripted:quick.script.yaml\n",
        "quick.script.yaml": '- text: "hi"\n',
        # waits for a human before its one tool call: a run that goes on until decided
        "agents/careful.yaml": (
            "description: asks first\nmodel: scripted:careful.script.yaml\ntools: [calculator]\n"
            "hooks:\n  - use: confirm\n    with: {all: true, poll: 0.05, timeout: 120}\n"
        ),
        "careful.script.yaml": (
            '- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]\n- text: "42"\n'
        ),
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


def waiting_run(url: str) -> tuple[str, str]:
    """A background run of key A that goes on until its tool call is approved: its id,
    and the approval's."""
    body = {"input": "6*7?", "background": True}
    accepted = httpx.post(f"{url}/v1/agents/careful/runs", json=body, headers=A)
    assert accepted.status_code == 202, accepted.text

    def approval() -> str | None:
        items = httpx.get(f"{url}/v1/approvals", headers=A).json()["approvals"]
        return next((item["id"] for item in items), None)

    return accepted.json()["run_id"], str(until(approval, what="the careful run's approval"))


def follow(stack: ExitStack, client: httpx.Client, url: str, run_id: str) -> httpx.Response:
    stream = stack.enter_context(client.stream("GET", f"{url}/v1/runs/{run_id}/events", headers=A))
    assert stream.status_code == 200, stream.read()
    return stream


def test_a_key_following_as_many_runs_as_it_may_is_refused_another_key_is_not(
    served: tuple[str, Any],
):
    url, api = served
    owner = key_owner(b"key-a")
    run_id, approval = waiting_run(url)
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=0)
    with httpx.Client(limits=limits, timeout=30) as client, ExitStack() as stack:
        followers = [follow(stack, client, url, run_id) for _ in range(FOLLOWERS_PER_OWNER)]
        assert api.limits.following(owner) == FOLLOWERS_PER_OWNER

        over = client.get(f"{url}/v1/runs/{run_id}/events", headers=A)
        assert over.status_code == 429, over.text
        assert over.headers["Retry-After"].isdigit()
        problem = over.json()["error"]
        assert problem["code"] == "rate_limit_exceeded" and problem["hint"]
        assert "GET /v1/runs/{id}/events" in problem["message"]
        assert f"already follows {FOLLOWERS_PER_OWNER}" in problem["message"]
        assert "server.key_limits.max_parallel_runs" in problem["message"]

        # another key runs and follows its own run as before
        theirs = httpx.post(f"{url}/v1/agents/quick/runs", json={"input": "x"}, headers=B)
        assert theirs.status_code == 200 and theirs.json()["output"] == "hi"
        replay = client.get(f"{url}/v1/runs/{theirs.json()['run_id']}/events", headers=B)
        assert replay.status_code == 200
        kinds = [event["type"] for _, event in sse_frames(iter(replay.text.splitlines()))]
        assert kinds[-1] == "run_finished"

        # a stream its client closes gives its place back
        followers[0].close()
        until(lambda: api.limits.following(owner) == FOLLOWERS_PER_OWNER - 1, what="release")
        again = follow(stack, client, url, run_id)
        assert api.limits.following(owner) == FOLLOWERS_PER_OWNER

        # a stream that ends with its run's last event gives it back too
        decided = httpx.post(
            f"{url}/v1/approvals/{approval}", json={"decision": "approve"}, headers=A
        )
        assert decided.status_code == 200, decided.text
        events = [event["type"] for _, event in sse_frames(again.iter_lines())]
        assert events[-1] == "run_finished"
    until(lambda: api.limits.following(owner) == 0, what="every follower's place back")


def test_a_refused_or_unknown_run_takes_no_place(served: tuple[str, Any]):
    url, api = served
    for _ in range(FOLLOWERS_PER_OWNER + 2):
        assert httpx.get(f"{url}/v1/runs/nope/events", headers=A).status_code == 404
    assert api.limits.following(key_owner(b"key-a")) == 0


# -- the counts themselves ---------------------------------------------------------------


def test_without_keys_every_caller_shares_one_count_limits_or_not():
    settings: list[KeyLimits | None] = [None]
    limiter = KeyLimiter(lambda: settings[0])
    held = [limiter.follow("") for _ in range(FOLLOWERS_PER_OWNER)]
    with pytest.raises(Busy) as caught:
        limiter.follow("")
    assert "this server (it has no API keys)" in caught.value.message
    assert caught.value.retry_after == 1
    assert limiter.going("") == 0  # following is not running
    held[0].release()
    held[0].release()  # once
    assert limiter.following("") == FOLLOWERS_PER_OWNER - 1
    limiter.follow("")


def test_a_key_may_follow_every_run_it_may_have_going():
    assert followers_cap(None) == FOLLOWERS_PER_OWNER
    assert followers_cap(KeyLimits(max_parallel_runs=2)) == FOLLOWERS_PER_OWNER
    assert followers_cap(KeyLimits(max_parallel_runs=40)) == 40
    settings: list[KeyLimits | None] = [KeyLimits(max_parallel_runs=40)]
    limiter = KeyLimiter(lambda: settings[0])
    for _ in range(40):
        limiter.follow("k")
    with pytest.raises(Busy):
        limiter.follow("k")
    assert limiter.follow("other").open
