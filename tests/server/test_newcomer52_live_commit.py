"""Newcomer 52 #8: which commit is live, said everywhere an SRE looks.

Only `/readyz` and `/v1/status` named the served commit. Now `fim serve`'s start line
(text and JSON fields) names the `commit`, and with `--git` the `ref` and the `source`
(its credentials masked); a `--git` reload's line carries `commit`, `previous`, `author`
and `subject` as fields; `/metrics` has `fim_snapshot_info{snapshot,commit}` for the
snapshot served now (only it) and `fim_build_info{version}`; a served run's record names
the `snapshot` (and `commit`) it ran on, as a background run's does, and `GET
/v1/runs?snapshot=` finds a rollout's runs; each JSON log line carries the `pid`, so the
lines of `--workers N` tell their processes apart.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from fim.build.compile import compile_project
from fim.build.gitops import GitSource, initial_snapshot, pull_once
from fim.build.reload import SnapshotHolder
from fim.observe.logs import JsonFormatter, announce
from fim.server import banner_fields
from fim.server.app import create_app
from fim.version import fim_version
from tests.build.remote_repo import Remote, agent_yaml

TOKEN = "ghp_n52SECRETtoken"


def test_the_start_line_names_the_commit_the_ref_and_the_masked_source(tmp_path: Path) -> None:
    remote = Remote(tmp_path)
    sha = remote.commit(remote.project(f"sqlite:///{tmp_path}/s.db"), "first")
    url = f"file://bot:{TOKEN}@localhost{remote.bare}"
    source = GitSource(url=str(remote.bare), checkout=tmp_path / "co")
    snapshot = initial_snapshot(source)
    source.url = url  # as given on the command line: a token in the URL
    line, fields = banner_fields(snapshot, "127.0.0.1", 8000, False, source)
    assert fields["commit"] == sha and fields["ref"] == "main"
    assert fields["source"] == f"file://***@localhost{remote.bare}"
    assert f"commit {sha}" in line and "ref main" in line
    assert TOKEN not in line + json.dumps(fields)

    written = io.StringIO()  # as `--log-format json` writes it: one record, these fields
    handler = logging.StreamHandler(written)
    handler.setFormatter(JsonFormatter())
    logging.getLogger().addHandler(handler)
    try:
        announce(line, **fields)
    finally:
        logging.getLogger().removeHandler(handler)
    record = json.loads(written.getvalue())
    assert record["logger"] == "fim.serve"
    assert (record["commit"], record["ref"]) == (sha, "main")
    assert record["source"] == f"file://***@localhost{remote.bare}"


def test_a_project_in_a_git_checkout_names_its_head(tmp_path: Path) -> None:
    remote = Remote(tmp_path)
    sha = remote.commit(remote.project(f"sqlite:///{tmp_path}/s.db"), "first")
    _, fields = banner_fields(compile_project(remote.work), "127.0.0.1", 8000, True)
    assert fields["commit"] == sha and "ref" not in fields
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "fim.yaml").write_text("name: plain\n")
    _, fields = banner_fields(compile_project(plain), "127.0.0.1", 8000, True)
    assert "commit" not in fields


async def test_a_git_reload_line_carries_the_commit_and_who_made_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    remote = Remote(tmp_path)
    old = remote.commit(remote.project(f"sqlite:///{tmp_path}/s.db"), "first")
    source = GitSource(url=str(remote.bare), checkout=tmp_path / "co")
    holder = SnapshotHolder(initial_snapshot(source))
    new = remote.commit({"agents/echo.yaml": agent_yaml("v2")}, "Page the on-call")
    with caplog.at_level(logging.INFO, logger="fim.build.gitops"):
        assert await pull_once(source, holder)
    (record,) = [r for r in caplog.records if "now serving" in r.getMessage()]
    logged = json.loads(JsonFormatter().format(record))
    assert (logged["commit"], logged["previous"]) == (new, old)
    assert (logged["author"], logged["subject"]) == ("t", "Page the on-call")
    assert logged["pid"] == os.getpid()


def test_metrics_name_the_snapshot_served_now_and_fims_version(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    remote = Remote(tmp_path)
    sha = remote.commit(remote.project(f"sqlite:///{tmp_path}/s.db"), "first")
    holder = SnapshotHolder(compile_project(remote.work))
    version = holder.current.version
    with TestClient(create_app(holder), base_url="http://localhost") as client:
        text = client.get("/metrics").text
        assert f'fim_snapshot_info{{commit="{sha}",snapshot="{version}"}} 1.0' in text
        assert f'fim_build_info{{version="{fim_version()}"}} 1.0' in text
        holder.swap(dataclasses.replace(holder.current, version="v-next"))  # a reload
        after = client.get("/metrics").text
    assert after.count("fim_snapshot_info{") == 1  # the current snapshot's only
    assert f'snapshot="{version}"' not in after


def test_a_served_runs_record_names_its_snapshot_and_the_runs_filter_on_it(
    tmp_path: Path,
) -> None:
    remote = Remote(tmp_path)
    sha = remote.commit(remote.project(f"sqlite:///{tmp_path}/s.db"), "first")
    holder = SnapshotHolder(compile_project(remote.work))
    with TestClient(create_app(holder), base_url="http://localhost") as client:
        ran = client.post("/v1/agents/echo/runs", json={"input": "ping"}).json()
        record = client.get(f"/v1/runs/{ran['run_id']}").json()
        assert record["data"]["snapshot"] == holder.current.version
        assert record["data"]["commit"] == sha

        def listed(snapshot: str) -> list[str]:
            runs = client.get("/v1/runs", params={"snapshot": snapshot}).json()["runs"]
            return [r["id"] for r in runs]

        assert listed(sha[:12]) == [ran["run_id"]]  # a commit's 12 characters
        assert listed(holder.current.version) == [ran["run_id"]]
        assert listed("0000000") == []
        assert client.get("/v1/runs", params={"snapshot": "ab"}).status_code == 400


def test_a_json_log_line_names_its_process() -> None:
    record = logging.LogRecord("fim.server", logging.INFO, "", 0, "hello", (), None)
    assert json.loads(JsonFormatter().format(record))["pid"] == os.getpid()
