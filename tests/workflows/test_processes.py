"""Whether a process recorded elsewhere is alive, one answer for an approval's waiter, a
workflow run's owner and a `fim run` in the store: a pid means something only in its
process table (boot and pid namespace), and its start tick tells a reused pid apart."""

from __future__ import annotations

import socket
import subprocess
import sys

from fim.processes import alive, process_table, this_process
from fim.workflows.state import RunState, orphaned


def gone_pid() -> int:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    return ended.pid


def test_this_process_is_alive_and_a_finished_one_is_not() -> None:
    me = this_process()
    assert alive(me) is True
    assert alive({**me, "pid": gone_pid(), "started": None}) is False


def test_another_process_table_cannot_be_told_whatever_its_hostname() -> None:
    """A container on the host's network shares the hostname, not the pids: its pid 1234
    says nothing about this table's pid 1234."""
    me = this_process()
    elsewhere = {**me, "table": process_table() + "-other", "pid": gone_pid()}
    assert alive(elsewhere) is None
    assert alive({"pid": gone_pid(), "host": "another-host"}) is None  # an older record
    assert alive({"pid": gone_pid(), "host": socket.gethostname()}) is False
    assert alive(None) is None and alive({}) is None


def test_a_pid_reused_by_a_newer_process_is_not_the_recorded_one() -> None:
    me = this_process()
    if me["started"] is None:  # not Linux: no start tick to compare
        return
    assert alive({**me, "started": me["started"] - 1}) is False


def test_a_workflow_run_in_another_container_is_not_taken_for_orphaned() -> None:
    """`fim serve` lists orphaned runs at start, and `fim workflow resume` takes one over:
    a run driven from another container with the same hostname was "orphaned" as soon as
    its pid was free here."""
    me = this_process()
    other = {**me, "table": process_table() + "-other", "pid": gone_pid()}
    there = RunState("r1", "w", {}, {}, {}, status="running", owner=other)
    assert not orphaned(there)
    ended = {**me, "pid": gone_pid(), "started": None}
    assert orphaned(RunState("r2", "w", {}, {}, {}, status="running", owner=ended))
