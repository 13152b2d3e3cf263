"""Runs belong to the key that started them (`fim.store.owners`): on a server with
`server.api_keys`, `GET /v1/runs`, `GET /v1/runs/{id}` and its event stream show a run
only to that key, whichever surface started it (a run, a streamed run, a background run,
a workflow run, the OpenAI endpoint, streamed or not); another key is told the run does
not exist, as it is told of another key's session. Without keys, anyone reads any run."""

from __future__ import annotations

from pathlib import Path

import httpx
from test_background_runs import project, served

from fim.store.owners import claim, may_read, owner_of

A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}


def keyed(root: Path) -> Path:
    (root / "fim.yaml").write_text(
        'name: bg\nstate: "sqlite:///.fim/state.db"\nserver:\n  api_keys: [key-a, key-b]\n'
    )
    return root


def sse_run_id(response: httpx.Response) -> str:
    for line in response.text.splitlines():
        if line.startswith("data: ") and '"run_id"' in line:
            return str(httpx.Response(200, content=line[6:]).json()["run_id"])
    raise AssertionError(f"no run id in {response.text[:200]!r}")


def test_a_keyed_servers_runs_are_seen_only_by_the_key_that_started_them(tmp_path: Path):
    root = keyed(project(tmp_path / "p", "sqlite:///.fim/state.db"))
    with served(root) as url:
        started = {
            httpx.post(f"{url}/v1/agents/math/runs", json={"input": "6*7?"}, headers=A).json()[
                "run_id"
            ],
            sse_run_id(
                httpx.post(
                    f"{url}/v1/agents/math/runs", json={"input": "6*7?", "stream": True}, headers=A
                )
            ),
            httpx.post(
                f"{url}/v1/agents/math/runs", json={"input": "6*7?", "background": True}, headers=A
            ).json()["run_id"],
            httpx.post(
                f"{url}/v1/workflows/refund/runs", json={"inputs": {"amount": 5}}, headers=A
            ).json()["run_id"],
        }
        chat = {"model": "math", "messages": [{"role": "user", "content": "6*7?"}]}
        assert httpx.post(f"{url}/v1/chat/completions", json=chat, headers=A).status_code == 200
        streamed = httpx.post(
            f"{url}/v1/chat/completions", json={**chat, "stream": True}, headers=A
        )
        assert streamed.status_code == 200 and "[DONE]" in streamed.text
        mine = {run["id"] for run in httpx.get(f"{url}/v1/runs", headers=A).json()["runs"]}
        assert started <= mine and len(mine) == 6  # and the two OpenAI runs
        assert httpx.get(f"{url}/v1/runs", headers=B).json()["runs"] == []
        for run_id in mine:
            for path in (f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/events"):
                other = httpx.get(url + path, headers=B)
                assert other.status_code == 404 and run_id in other.json()["error"]["message"]
            assert httpx.get(f"{url}/v1/runs/{run_id}", headers=A).json()["id"] == run_id
        b_run = httpx.post(f"{url}/v1/agents/math/runs", json={"input": "1+1?"}, headers=B)
        theirs = [run["id"] for run in httpx.get(f"{url}/v1/runs", headers=B).json()["runs"]]
        assert theirs == [b_run.json()["run_id"]]


def test_without_keys_anyone_reads_any_run(tmp_path: Path):
    root = project(tmp_path / "p", "sqlite:///.fim/state.db")
    with served(root) as url:
        ran = httpx.post(f"{url}/v1/agents/math/runs", json={"input": "6*7?"}, headers=A)
        run_id = ran.json()["run_id"]
        assert httpx.get(f"{url}/v1/runs/{run_id}", headers=B).status_code == 200
        assert [r["id"] for r in httpx.get(f"{url}/v1/runs").json()["runs"]] == [run_id]


async def test_a_run_nobody_claimed_is_no_keyed_callers(store_url: str):
    """A run started by `fim run`, `fim eval` or a worker's schedule has no owner row: a
    keyed caller never reads it (the check fails closed); only an open server shows it."""
    from fim.store import Store

    store = Store(store_url)
    try:
        await store.put_run("cli", "agent", "math", "ok", {})
        await store.put_run("mine", "agent", "math", "ok", {})
        await claim(store, "mine", "hash-a")
        assert await owner_of(store, "cli") is None and await owner_of(store, "mine") == "hash-a"
        assert not await may_read(store, "cli", "hash-a") and await may_read(store, "cli", "")
        assert await may_read(store, "mine", "hash-a") and not await may_read(store, "mine", "b")
        assert [r.id for r in await store.list_runs(owner="hash-a")] == ["mine"]
        assert {r.id for r in await store.list_runs()} == {"cli", "mine"}
    finally:
        store.close()
