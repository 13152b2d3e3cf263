"""Graceful under abuse: `fim serve` latency with and without six hostile tool calls.

Starts `fim serve` on a loopback port for a throwaway project whose agents use scripted
models (no model endpoint, no network): six `hostile_N` agents each make one hostile tool
call per run (a Jinja `9**(9**8)`, nested `range` loops, a backtracking `matches` filter,
a backtracking `regex_find`, a 1 GB find/replace, a 1 GB string), and two normal agents
(`plain` answers at once; `calc` calls the calculator, which shares the worker pool with
the hostile calls). From this process it measures:

  healthz   GET /healthz, one request every 10 ms
  plain     POST /v1/agents/plain/runs, back to back
  calc      POST /v1/agents/calc/runs, back to back

first for a quiet phase, then while six clients keep one hostile run each in flight
(each hostile client starts its next run as soon as the previous one answers, so six
hostile calls are always running or queued). Prints p50/p99 of both phases and the ratio.
Target (issue 16): /healthz p99 under 100 ms under abuse.

    python bench/abuse.py [--quick]
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import bench_env, fim_command, machine, ms, percentile, quick_flag, stop_process, table

from fim.testing.server import free_port

HOSTILE = {
    "template_exponent": ("template_render", {"template": "{{ (9**(9**8)) % 10 }}"}),
    "template_loops": (
        "template_render",
        {
            "template": "{% for i in range(100000) %}{% for j in range(100000) %}"
            "{% endfor %}{% endfor %}"
        },
    ),
    "json_backtracking": (
        "json_transform",
        {
            "data": [{"s": "a" * 40 + "!"}],
            "operations": [
                {"op": "filter", "field": "s", "compare": "matches", "value": "^(a+)+$"}
            ],
        },
    ),
    "regex_backtracking": (
        "text_utils",
        {"operation": "regex_find", "text": "a" * 40_000 + "!", "pattern": "(a+)+$"},
    ),
    "replace_blowup": (
        "text_utils",
        {"operation": "find_replace", "text": "a" * 100_000, "find": "a", "replace": "b" * 10_000},
    ),
    "memory_blowup": ("template_render", {"template": "{{ 'a' * 10**9 }}"}),
}
TOOLS = "[template_render, json_transform, text_utils, calculator]"


def write_project(root: Path) -> None:
    import json

    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(f"name: abuse\nstate: sqlite:///{root / 'state.db'}\n")
    scripts = {
        "plain": '- text: "hello"\n',
        "calc": '- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]\n'
        '- text: "42"\n',
    }
    for n, (tool, args) in enumerate(HOSTILE.values(), 1):
        call = json.dumps([{"name": tool, "arguments": args}])
        scripts[f"hostile_{n}"] = f"- tool_calls: {call}\n- text: done\n"
    for name, script in scripts.items():
        (root / f"{name}.script.yaml").write_text(script)
        (root / "agents" / f"{name}.yaml").write_text(
            f"description: {name}\nmodel: scripted:{name}.script.yaml\ntools: {TOOLS}\n"
        )


async def poll_healthz(client: httpx.AsyncClient, until: float, out: list[float]) -> None:
    while time.monotonic() < until:
        start = time.perf_counter()
        response = await client.get("/healthz")
        out.append(time.perf_counter() - start)
        assert response.status_code == 200
        await asyncio.sleep(0.01)


async def loop_runs(
    client: httpx.AsyncClient, agent: str, until: float, out: list[float], errors: list[str]
) -> None:
    while time.monotonic() < until:
        start = time.perf_counter()
        response = await client.post(f"/v1/agents/{agent}/runs", json={"input": "go"})
        out.append(time.perf_counter() - start)
        if response.status_code != 200 or response.json().get("status") != "ok":
            errors.append(f"{agent}: {response.status_code} {response.text[:200]}")


async def phase(url: str, seconds: float, hostile: bool) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"healthz": [], "plain": [], "calc": [], "hostile": []}
    errors: list[str] = []
    limits = httpx.Limits(max_connections=20)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        until = time.monotonic() + seconds
        tasks = [
            poll_healthz(client, until, samples["healthz"]),
            loop_runs(client, "plain", until, samples["plain"], errors),
            loop_runs(client, "calc", until, samples["calc"], errors),
        ]
        if hostile:
            tasks += [
                loop_runs(client, f"hostile_{n}", until, samples["hostile"], errors)
                for n in range(1, len(HOSTILE) + 1)
            ]
        await asyncio.gather(*tasks)
    for line in errors[:5]:
        print("error:", line)
    return samples


async def wait_ready(url: str) -> None:
    async with httpx.AsyncClient(base_url=url) as client:
        for _ in range(300):
            try:
                if (await client.get("/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
    sys.exit("fim serve did not start")


async def warm(url: str) -> None:
    """One run of each normal agent, so the worker pool and the store exist before timing."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for agent in ("plain", "calc"):
            await client.post(f"/v1/agents/{agent}/runs", json={"input": "go"})


def main() -> None:
    quick = quick_flag(__doc__ or "")
    seconds = 8.0 if quick else 20.0
    with tempfile.TemporaryDirectory(prefix="fim-abuse-") as tmp:
        root = Path(tmp) / "project"
        write_project(root)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        args = fim_command("serve", "--project", str(root), "--port", str(port), "--no-reload")
        server = subprocess.Popen(
            [*args, "--log-level", "warning"], env=bench_env(), stderr=subprocess.DEVNULL
        )
        try:
            asyncio.run(wait_ready(url))
            asyncio.run(warm(url))
            quiet = asyncio.run(phase(url, seconds, hostile=False))
            abused = asyncio.run(phase(url, seconds, hostile=True))
        finally:
            stop_process(server)
    print(f"\nfim serve under abuse ({machine()}; {seconds:g} s per phase)")
    rows = []
    for name in ("healthz", "plain", "calc"):
        for q in (50, 99):
            before = percentile(quiet[name], q)
            after = percentile(abused[name], q)
            rows.append(
                [f"{name} p{q}", ms(before), ms(after), f"{after / before:.1f}x"],
            )
        rows.append([f"{name} n", len(quiet[name]), len(abused[name]), ""])
    table(["measure", "quiet", "6 hostile calls", "ratio"], rows)
    print(f"hostile runs completed: {len(abused['hostile'])}")
    p99 = percentile(abused["healthz"], 99)
    verdict = "met" if p99 < 0.1 else "MISSED"
    print(f"target /healthz p99 < 100 ms under abuse: {verdict} ({ms(p99)})")


if __name__ == "__main__":
    main()
