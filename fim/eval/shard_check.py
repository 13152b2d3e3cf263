"""Whether the reports `fim eval merge` is given are every shard of one run.

A shard's JSON report says which shard it is (`"shard": {"index": I, "total": N}`, written
by `fim eval --shard I/N --json`). Merged without one of them, the run passed over the
shards that survived: a CI job that died before uploading its report (an OOM-killed
runner, a failed install) gave a green gate (newcomer51 #1). Reports written without
`--shard` (or by an older fim) say nothing, and nothing is checked for them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fim.errors import RunError


def check_shards(reports: list[dict[str, Any]], paths: list[Path]) -> None:
    """Raise when the shard reports among `reports` (read from `paths`) are not every
    shard 1..N of one run: a shard missing, given twice, or shards of runs with another N."""
    shards = [
        (path, report["shard"])
        for path, report in zip(paths, reports, strict=True)
        if isinstance(report.get("shard"), dict) and not report.get("rerun")
    ]  # a --rerun-failed report re-runs a shard's failures: it stands for no shard
    if not shards:
        return
    totals = sorted({shard["total"] for _, shard in shards})
    if len(totals) > 1:
        said = ", ".join(f"{path} is {s['index']}/{s['total']}" for path, s in shards)
        raise RunError(
            f"shards of runs with different N: {said}",
            hint="merge the shard reports of one run (--shard I/N, the same N)",
        )
    total = totals[0]
    seen: dict[int, Path] = {}
    for path, shard in shards:
        index = shard["index"]
        if index in seen:
            raise RunError(
                f"shard {index}/{total} given twice: {seen[index]} and {path}",
                hint="merge each shard's report once",
            )
        seen[index] = path
    missing = [f"{i}/{total}" for i in range(1, total + 1) if i not in seen]
    if missing:
        many = len(missing) > 1
        raise RunError(
            f"shard{'s' if many else ''} {', '.join(missing)} missing: merge every shard's report",
            hint="did that shard's job fail before uploading its --json? the download "
            "pattern should match every shard",
        )


__all__ = ["check_shards"]
