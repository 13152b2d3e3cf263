"""multiprocessing's helper processes (the isolate pools' forkserver, the resource tracker)
hold none of fim's secrets and are not dumpable (attack-28 #1), and nothing else changes:
the forkserver still pre-imports the tool modules, a spawned child still gets the whole
environment, and importing the launcher's module elsewhere does nothing.

Each scenario runs in a fresh Python (multiprocessing's helpers are one per process), with
fim on PYTHONPATH as in a source checkout. "Not dumpable" is checked as the attacker sees
it: a process of the same user without capabilities cannot open `/proc/<pid>/environ`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).parents[2]
SECRET = "sk-fim-helpers-planted-0123456789abcdef"

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/environ").exists(), reason="no /proc/<pid>/environ here"
)

SCENARIO = """
import asyncio, ctypes, json, multiprocessing, os, subprocess, sys
from fim.environ import hide_from_children
from fim.tools import isolate


def loaded(name):
    return name in sys.modules


def environment(_):
    return os.environ.get("OPENAI_API_KEY")


def no_capabilities():
    if os.geteuid() == 0:  # root without capabilities: a plain same-user process
        for cap in range(64):
            ctypes.CDLL(None).prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP


def helpers():
    children = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as listed:
            children += listed.read().split()
    found = {}
    for pid in children:
        with open(f"/proc/{pid}/cmdline", "rb") as cmd, open(f"/proc/{pid}/environ", "rb") as b:
            name = cmd.read().split(b"from multiprocessing.")[-1][:15].decode()
            held = sys.argv[1].encode() in b.read()
        peek = subprocess.run(
            ["cat", f"/proc/{pid}/environ"], capture_output=True, preexec_fn=no_capabilities
        )
        found[name] = {"holds_secret": held, "readable": peek.returncode == 0}
    return found


async def main():
    await isolate.pool()
    preloaded = await isolate.call(loaded, "jinja2.sandbox", timeout=10)
    with multiprocessing.get_context("spawn").Pool(1) as spawned:
        passed = spawned.map(environment, [0])[0]
    return {"preloaded": preloaded, "spawned_env": passed == sys.argv[1], "helpers": helpers()}


if __name__ == "__main__":
    hide_from_children()  # what fim.cli.main does first
    print(json.dumps(asyncio.run(main())))
    isolate.shutdown()
"""


def run_scenario(tmp_path: Path, script: str) -> dict[str, object]:
    (tmp_path / "scenario.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "HOME")}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "scenario.py"), SECRET],
        env={**env, "OPENAI_API_KEY": SECRET, "PYTHONPATH": str(CHECKOUT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_the_forkserver_and_resource_tracker_hold_no_secret_and_are_not_dumpable(
    tmp_path: Path,
) -> None:
    """They start with an allow-listed environment (PATH, HOME, LANG, PYTHONPATH ...) and
    make themselves not dumpable before multiprocessing's code runs; the forkserver still
    pre-imports the tool modules (fim found through PYTHONPATH), and a child spawned by the
    same process still gets the whole environment, as multiprocessing promises."""
    found = run_scenario(tmp_path, SCENARIO)
    assert found["helpers"] == {
        "resource_tracke": {"holds_secret": False, "readable": False},
        "forkserver impo": {"holds_secret": False, "readable": False},
    }
    assert found["preloaded"] is True
    assert found["spawned_env"] is True


def test_importing_the_launchers_module_elsewhere_changes_nothing() -> None:
    """The forkserver's first pre-import makes it not dumpable only where the launcher's
    marker is set: a library caller importing it keeps its core dumps and debuggers."""
    probe = (
        "import ctypes, os; import fim.tools.isolate_helpers; "
        "print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0), os.environ.get('KEEP'))"
    )
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT), "KEEP": "kept"}
    env.pop("FIM_ISOLATE_HELPER", None)
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["1", "kept"]  # PR_GET_DUMPABLE: still dumpable


SUPERVISOR = """
import json, multiprocessing, os, sys
from multiprocessing import spawn
from fim.environ import hide_from_children
from fim.tools.isolate_helpers import start_tracker_clean


def environment(_):
    return os.environ.get("OPENAI_API_KEY")


if __name__ == "__main__":
    hide_from_children()
    before = spawn.get_executable()
    start_tracker_clean()  # what `fim serve --workers` does before uvicorn spawns
    with multiprocessing.get_context("spawn").Pool(1) as spawned:
        passed = spawned.map(environment, [0])[0]
    children = open(f"/proc/self/task/{os.getpid()}/children").read().split()
    held = [p for p in children if sys.argv[1].encode() in open(f"/proc/{p}/environ", "rb").read()]
    restored = spawn.get_executable() == before
    passed = passed == sys.argv[1]
    print(json.dumps({"children": len(children), "holding": held, "spawned_env": passed,
                      "restored": restored}))
"""


def test_a_supervisor_starts_its_resource_tracker_clean_and_spawns_as_before(
    tmp_path: Path,
) -> None:
    """`fim serve --workers`: uvicorn spawns the children (with the whole environment, which
    `worker_app` hides at once), and spawning starts multiprocessing's resource tracker,
    which lived as long as the supervisor with every key. It is started clean first, and
    multiprocessing gets its executable back (later spawns do not need the launcher)."""
    found = run_scenario(tmp_path, SUPERVISOR)
    assert found == {"children": 1, "holding": [], "spawned_env": True, "restored": True}
