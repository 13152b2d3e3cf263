"""Newcomer 52, finding 7: a secret can come from a file, and a rotated file is read again.

A Kubernetes Secret mounted as a volume (or a Docker secret) is a file, updated in place
when the Secret changes. `${file:/path}` is the file's text (trailing line breaks off); a
bare `${VAR}` whose variable is unset reads the file `VAR_FILE` names (Docker's
convention). What a file gives is a secret, masked like a variable's; a file that cannot
be read is an unset variable whose problem names the file, never its content. Each load
reads the files again, so the next reload serves a rotated value: a reload whose files
are unchanged but whose secret rotated swaps the snapshot in.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder, reload_once
from fim.config.interpolate import interpolate
from fim.config.yamlio import parse


def rotate(secret: Path, value: str) -> None:
    """As the kubelet updates a Secret volume: a new file put in place atomically."""
    fresh = secret.with_name(secret.name + ".new")
    fresh.write_text(value)
    os.replace(fresh, secret)


def expand(text: str, env: dict[str, str]) -> tuple[object, set[str], list[str]]:
    doc = parse(text, "connectors/status.yaml")
    secrets: set[str] = set()
    interpolate(doc, secrets, env)
    return doc.data, secrets, [p.message for _, p in doc.unset]


def test_a_file_reference_is_the_files_text_without_its_trailing_newline(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "status_token"
    secret.write_text("tok-v1\n")
    data, secrets, unset = expand(f'token: "${{file:{secret}}}"\n', {})
    assert data == {"token": "tok-v1"} and unset == []
    assert secrets == {"tok-v1"}  # masked wherever text leaves fim, as a variable's value


def test_an_unset_variable_reads_the_file_its_FILE_variable_names(tmp_path: Path) -> None:
    secret = tmp_path / "status_token"
    secret.write_text("tok-v1\n")
    env = {"STATUS_TOKEN_FILE": str(secret)}
    data, secrets, _ = expand('token: "${STATUS_TOKEN}"\n', env)
    assert data == {"token": "tok-v1"} and secrets == {"tok-v1"}
    # the variable itself wins over the file
    data, _, _ = expand('token: "${STATUS_TOKEN}"\n', {**env, "STATUS_TOKEN": "from-env"})
    assert data == {"token": "from-env"}


def test_a_file_that_cannot_be_read_is_an_unset_variable_naming_the_file(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "absent"
    _, secrets, unset = expand(f'token: "${{file:{missing}}}"\n', {})
    assert unset == [f"secret file '{missing}', which cannot be read (No such file or directory)"]
    _, _, unset = expand('token: "${STATUS_TOKEN}"\n', {"STATUS_TOKEN_FILE": str(missing)})
    assert unset == [
        f"environment variable 'STATUS_TOKEN' is not set and STATUS_TOKEN_FILE names "
        f"'{missing}', which cannot be read (No such file or directory)"
    ]
    _, _, unset = expand('token: "${file:relative/token}"\n', {})
    assert unset == ["secret file 'relative/token', which cannot be read (not an absolute path)"]
    assert secrets == set()


CONNECTOR = (
    "kind: http\n"
    "base_url: http://127.0.0.1:9\n"
    "auth: {{type: bearer, token: {token}}}\n"
    "actions:\n"
    "  get_status: {{path: /status}}\n"
)


def project(tmp_path: Path, token: str) -> Path:
    root = tmp_path / "ops"
    (root / "connectors").mkdir(parents=True)
    (root / "agents").mkdir()
    (root / "fim.yaml").write_text("name: ops\n")
    (root / "s.yaml").write_text("- text: done\n")
    (root / "connectors" / "status.yaml").write_text(CONNECTOR.format(token=token))
    (root / "agents" / "oncall.yaml").write_text("model: scripted:s.yaml\nconnectors: [status]\n")
    return root


def token_of(snapshot: object) -> str:
    return snapshot.connectors["status"].auth.token  # type: ignore[attr-defined]


@pytest.mark.parametrize("form", ["file", "VAR_FILE"])
def test_each_compile_reads_the_file_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    secret = tmp_path / "status_token"
    secret.write_text("tok-v1\n")
    monkeypatch.delenv("N52_TOKEN", raising=False)
    monkeypatch.setenv("N52_TOKEN_FILE", str(secret))
    token = f'"${{file:{secret}}}"' if form == "file" else '"${N52_TOKEN}"'
    root = project(tmp_path, token)
    first = compile_project(root)
    assert token_of(first) == "tok-v1" and "tok-v1" in first.secrets
    rotate(secret, "tok-v2\n")
    second = compile_project(root)
    assert token_of(second) == "tok-v2"
    assert second.mask("Bearer tok-v2") == "Bearer ***"


def test_a_missing_secret_file_makes_only_its_connector_unavailable(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    snapshot = compile_project(project(tmp_path, f'"${{file:{missing}}}"'))
    error = snapshot.unavailable("connector", "status")
    assert error is not None
    assert error.message.startswith(
        f"connector 'status' is unavailable: secret file '{missing}', which cannot be read"
    )
    assert "mount the secret there" in (error.hint or "")


async def test_a_reload_after_a_rotation_serves_the_new_secret(tmp_path: Path) -> None:
    secret = tmp_path / "status_token"
    secret.write_text("tok-v1\n")
    root = project(tmp_path, f'"${{file:{secret}}}"')
    holder = SnapshotHolder(compile_project(root))
    assert not await reload_once(root, holder)  # nothing changed: nothing swapped
    rotate(secret, "tok-v2\n")
    assert await reload_once(root, holder)
    assert token_of(holder.current) == "tok-v2"
