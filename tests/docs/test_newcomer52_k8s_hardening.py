"""The Kubernetes manifest runs fim with the usual least privilege, and the sketch in
docs/scale-out.md agrees with it (newcomer-52 #10)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def deployments() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((ROOT / "docs" / "kubernetes.yaml").read_text())
    return {d["metadata"]["name"]: d for d in docs if d and d["kind"] == "Deployment"}


def test_fim_pods_escalate_nothing_and_write_only_their_volumes() -> None:
    for name in ("fim-serve", "fim-worker"):
        pod = deployments()[name]["spec"]["template"]["spec"]
        (fim,) = [c for c in pod["containers"] if c["name"] == "fim"]
        assert fim["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }, name
        mounted = {m["mountPath"]: m["name"] for m in fim["volumeMounts"]}
        assert set(mounted) == {"/checkout", "/tmp"}, name  # the checkout holds `.fim/`
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert all("emptyDir" in volumes[v] for v in mounted.values()), name


def test_the_scale_out_sketch_takes_the_store_as_the_manifest_does() -> None:
    sketch = (ROOT / "docs" / "scale-out.md").read_text()
    manifest = (ROOT / "docs" / "kubernetes.yaml").read_text()
    assert "FIM_STATE_URL" in manifest and "FIM_STATE_URL" in sketch
    assert "FIM_STATE_PASSWORD" not in sketch
    assert "--git-fallback, last-good" in sketch and "--git-fallback, last-good" in manifest
