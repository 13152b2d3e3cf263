"""The CI examples in docs/ work as pasted (newcomer51 #6, #7).

- `actions/setup-python` with `cache: pip` stops when no requirements file matches, and a
  `fim init` project has none: every cached setup names `requirements-ci.txt`.
- The summary is written with `--markdown`, never piped through `tee` (in `sh`, the
  pipe's status is tee's and `${PIPESTATUS}` is a syntax error).
- The gate fails on cases no longer tested (`--fail-on-untested`), and GitLab reads the
  JUnit report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DOCS = Path(__file__).resolve().parent.parent / "docs"


def steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def test_github_example_caches_pip_on_a_requirements_file_it_installs():
    workflow = yaml.safe_load((DOCS / "github-actions-eval.yml").read_text())
    setups = [s for s in steps(workflow) if s.get("uses", "").startswith("actions/setup-python")]
    assert setups
    for setup in setups:
        if setup["with"].get("cache") == "pip":
            assert setup["with"]["cache-dependency-path"] == "requirements-ci.txt"
    installs = [s["run"] for s in steps(workflow) if "pip install" in s.get("run", "")]
    assert installs and all("-r requirements-ci.txt" in run for run in installs)


def test_github_example_writes_the_summary_without_a_pipe():
    text = (DOCS / "github-actions-eval.yml").read_text()
    merge = next(
        s["run"] for s in steps(yaml.safe_load(text)) if "fim eval merge" in s.get("run", "")
    )
    assert "--markdown summary.md" in merge and "--fail-on-untested" in merge
    assert "| tee" not in merge and "PIPESTATUS" not in text


def test_gitlab_example_reports_junit_and_runs_in_sh():
    pipeline = yaml.safe_load((DOCS / "gitlab-ci-eval.yml").read_text())
    report = pipeline["report"]
    assert report["artifacts"]["reports"]["junit"] == "junit.xml"
    script = "\n".join(report["script"])
    assert "--markdown summary.md" in script and "--fail-on-untested" in script
    assert "| tee" not in script and "PIPESTATUS" not in script
