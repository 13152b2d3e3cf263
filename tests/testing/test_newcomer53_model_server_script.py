"""The scripted model server has a console script, `fim-model-server` (newcomer-53 #11).

README's set-up clones fim into `fim/` and then works from the folder above it; there
`python -m fim.testing.model_server` imported the checkout's `fim/` folder (first on
`sys.path`) and failed with `No module named 'fim.workflows.node_types'`. A console script
does not put the working directory on `sys.path`, so it starts from any folder. README shows
it where it shows the model server; `python -m` keeps working from elsewhere
(tests/testing/test_newcomer50_model_server_port.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "fim-model-server"


def test_pyproject_declares_the_console_script() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["scripts"]["fim-model-server"] == "fim.testing.model_server:main"


def test_readme_starts_the_model_server_with_the_console_script() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = "\n".join(re.findall(r"```bash\n(.*?)```", readme, re.S))
    assert "fim-model-server --port 8765 --answer" in blocks
    assert "python -m fim.testing.model_server" not in blocks


@pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed: pip install -e .")
def test_the_script_serves_from_the_folder_holding_a_checkout(tmp_path: Path) -> None:
    (tmp_path / "fim" / "workflows").mkdir(parents=True)  # the clone, as README makes it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen(
        [str(SCRIPT), "--port", "0", "--answer", "ok"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        base_url = proc.stdout.readline().strip()
        if not base_url.startswith("http://127.0.0.1:"):
            proc.kill()
            pytest.fail(f"no base URL: {base_url!r} {proc.communicate(timeout=10)[1][-2000:]}")
        body = {"model": "stub", "messages": [{"role": "user", "content": "hi"}]}
        reply = httpx.post(f"{base_url}/chat/completions", json=body, timeout=10).json()
        assert reply["choices"][0]["message"]["content"] == "ok"
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
