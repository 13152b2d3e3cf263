"""A process's starting environment block is hidden from its children (`/proc/<pid>/environ`
reads zeros) while the process and its children keep every variable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """\
import json, os, subprocess, sys
from fim.environ import hide_initial_environment
hide_initial_environment()
block = open("/proc/self/environ", "rb").read()
child = subprocess.run(
    [sys.executable, "-c", "import os; print(os.environ['FIM_PLANTED'])"],
    capture_output=True, text=True,
).stdout.strip()
print(json.dumps({
    "block_has_it": b"planted-value" in block,
    "os_environ": os.environ.get("FIM_PLANTED"),
    "getenv_in_c": os.popen("printenv FIM_PLANTED").read().strip(),
    "child": child,
}))
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux /proc only")
def test_the_starting_block_reads_empty_and_every_variable_is_kept() -> None:
    env = {**os.environ, "FIM_PLANTED": "planted-value"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == {
        "block_has_it": False,
        "os_environ": "planted-value",
        "getenv_in_c": "planted-value",
        "child": "planted-value",
    }


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux /proc only")
def test_a_variable_the_c_library_cannot_set_again_leaves_the_block_alone() -> None:
    """An environment entry with no name (`=x`, which `env` can pass) cannot be copied to
    the heap: the block is left as it is rather than zeroed under it, and fim starts."""
    script = (
        "import os; from fim.environ import hide_initial_environment\n"
        "hide_initial_environment()\n"
        "print(b'planted-value' in open('/proc/self/environ', 'rb').read())\n"
    )
    out = subprocess.run(
        ["env", "=nameless", "FIM_PLANTED=planted-value", sys.executable, "-c", script],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("True", "False")  # started; zeroed only if every entry moved
