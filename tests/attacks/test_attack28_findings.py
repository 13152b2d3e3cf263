"""Attack round 28 (the fixes of f489fef..6ffbfdd: fim's environment and memory hidden from
its children, NUL made storable, refused usage rows kept counted, the sandbox's host-file
fixes): what must hold.

Each test states the safe behaviour of a finding of `/work/notes/attack-28.md` and is a
strict xfail until fim holds it. All offline: a loopback model stub, SQLite, bubblewrap
(skipped where it is missing).

- fim zeroes its start-up environment block and is not dumpable, but the isolate pool's
  forkserver and multiprocessing's resource tracker are exec'd with fim's whole
  environment, stay up for the life of the process and are dumpable: a command hook of
  the same user read `OPENAI_API_KEY` from their `/proc/<pid>/environ`.
- A provider naming its model with a lone surrogate (`"gpt\\ud800"`, valid JSON) makes every
  usage row fail to encode (NUL alone is made storable): the spend stays counted only in
  the process that ran it, so the next `fim run` (or another replica) never counts it.
- `disk_mb` (per call) is a poll: a call that allocates its files at once writes many
  times the cap before the watchdog's first count (RLIMIT_FSIZE bounds one file, not the
  number of them).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.events import LLMCall
from fim.run.agent import run_agent
from fim.testing.model_server import OpenAIStubServer
from fim.testing.runs import services_for
from fim.testing.stub_wire import completion
from fim.tools import sandbox
from fim.tools.sandbox.limits import Limits, held_bytes

CHECKOUT = Path(__file__).parents[2]
SECRET = "sk-fim-attack28-planted-0123456789abcdef"

needs_bwrap = pytest.mark.skipif(
    sandbox.unavailable() is not None,
    reason=f"bubblewrap is not installed here ({sandbox.unavailable()})",
)


def write(root: Path, files: dict[str, str]) -> None:
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(body)


# ------------------------------- #1 the isolate pool's helpers hold fim's environment

HELPERS = """
import asyncio, json, os, sys
from fim.environ import hide_from_children
from fim.tools import isolate

if __name__ == "__main__":
    hide_from_children()  # what fim.cli.main does first
    asyncio.run(isolate.pool())  # a calculator, template or regex call starts it
    children = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as listed:
            children += listed.read().split()
    holding = []
    for pid in children:
        with open(f"/proc/{pid}/environ", "rb") as block, open(f"/proc/{pid}/cmdline", "rb") as cmd:
            if sys.argv[1].encode() in block.read():
                holding.append(cmd.read().replace(b"\\0", b" ")[:80].decode())
    isolate.shutdown()
    print(json.dumps({"children": len(children), "holding": holding}))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="/proc/<pid>/environ is Linux's")
def test_the_isolate_pools_helper_processes_never_hold_fims_environment(tmp_path: Path) -> None:
    """fim hides its start-up block and is not dumpable (attack-23 #2, attack-25 #1), but
    the first calculator, json_transform, template or regex call starts the isolate pool:
    multiprocessing execs its resource tracker and forkserver with the C `environ` (every
    key fim holds), and each lives as long as fim, dumpable. As a normal user a command
    hook found `OPENAI_API_KEY` in both `/proc/<pid>/environ` (and their memory is as
    open). Safe: no process fim starts holds a secret it was not given."""
    script = tmp_path / "helpers.py"
    script.write_text(HELPERS)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "HOME")}
    done = subprocess.run(
        [sys.executable, str(script), SECRET],
        env={**env, "OPENAI_API_KEY": SECRET, "PYTHONPATH": str(CHECKOUT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["children"] >= 1  # the pool started its helpers
    assert found["holding"] == []  # today: the resource tracker and the forkserver


# ----------------------- #2 a lone surrogate in the provider's model name: no usage row


def _surrogate_model(request: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-compatible answer whose model name holds a lone surrogate (JSON `\\ud800`,
    which Python's json reads as it is) and 1,020 tokens."""
    return completion("y", None, "gpt\ud800", {"prompt_tokens": 20, "completion_tokens": 1000})


def test_a_providers_model_name_cannot_keep_a_run_out_of_the_next_processes_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NUL in stored text became U+FFFD (attack-24 #2), a lone surrogate did not: the usage
    row's `model` cannot be encoded (SQLite and PostgreSQL alike), the row is refused and
    only the process that ran the run keeps counting it. Every `fim run` is a new
    process (here: a new event loop, whose pools are its own), and so is another replica:
    a 1,000-token day let a second 1,020-token run through. Safe: the row is written (its
    text made storable), so the next process refuses the run before its model call."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-attack28-stub-key-0123456789")
    with OpenAIStubServer(handler=_surrogate_model) as stub:
        write(
            tmp_path,
            {
                "fim.yaml": 'name: b\nstate: "sqlite:///.fim/state.db"\n'
                "budget: {max_tokens_per_day: 1000}\n"
                f"models: {{general: {{model: openai/stub, api_base: '{stub.base_url}'}}}}\n",
                "agents/a.yaml": "description: d\nmodel: general\n",
            },
        )
        snapshot = compile_project(tmp_path)

        async def one_fim_run() -> list[Any]:
            services = services_for(snapshot)
            try:
                return [e async for e in run_agent(snapshot, "a", "hi", services=services)]
            finally:
                await services.aclose()

        first = asyncio.run(one_fim_run())
        second = asyncio.run(one_fim_run())
    assert [e.usage.total_tokens for e in first if isinstance(e, LLMCall)] == [1020]
    assert [e for e in second if isinstance(e, LLMCall)] == []  # today: called, 1,020 more


# --------------------------------------- #3 disk_mb: a poll a fast call outruns

ALLOCATE = (
    "import os\n"
    "for i in range(30):\n"
    "    os.posix_fallocate(os.open('f%d' % i, os.O_CREAT | os.O_WRONLY), 0, 8 * 2**20)\n"
)


@needs_bwrap
@pytest.mark.xfail(strict=True, reason="attack-28 #3: disk_mb is a poll")
async def test_a_sandboxed_call_cannot_write_many_times_its_disk_cap(tmp_path: Path) -> None:
    """docs/security.md: the tree is killed when it writes more than `disk_mb` in one call.
    RLIMIT_FSIZE now bounds each file (min of 64 MB and `disk_mb`), but not how many: the
    watchdog counts every 50 ms, and a call that allocates 30 files of `disk_mb` (8 MB
    here) at once wrote 184-240 MB before it was killed (2.4 GB in 0.4 s under the
    defaults, 16 MB folder_mb and 1 GB disk_mb). Safe: one call writes at most about its
    cap (here: under twice `disk_mb`)."""
    folder = tmp_path / "sandbox"
    outcome = await sandbox.run(
        ["python3", "-c", ALLOCATE],
        scratch=folder / "scratch",
        limits=Limits(disk_mb=8),
        folder=folder,
    )
    held = held_bytes(folder) or 0
    assert outcome.disk_exceeded or held <= 8 * 2**20  # it ran, and went past its cap
    assert held <= 16 * 2**20, f"{held >> 20} MB"  # today: 184-240 MB
