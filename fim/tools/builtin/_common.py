"""Helpers shared by the builtin tools (not a tool: the leading `_` keeps it out of discovery)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from fim.masking import Masker, known
from fim.types import ToolResult

if TYPE_CHECKING:
    from fim.run.services import RunContext


def fail(message: str) -> ToolResult:
    """An error observation. Messages say what was wrong and what to do next."""
    return ToolResult(content=f"Error: {message}", is_error=True)


def clip(text: str, limit: int, what: str = "output", masker: Masker | None = None) -> str:
    """Cut `text` to `limit` characters and say so, so the model knows it saw a part. What
    is cut is masked first (`Masker.head`, with `known()` unless a masker is given: a
    worker process is handed the parent's), or the cut could keep part of a secret that no
    mask matches afterwards."""
    shown, cut = (known() if masker is None else masker).head(text, limit)
    if not cut:
        return shown
    return shown + f"\n[... {what} truncated: showing {limit} of {len(text)} characters]"


def sandbox_dir(ctx: RunContext) -> Path:
    """The run's sandbox directory: the project's (`sandbox:` in fim.yaml, relative to the
    root), or for a run an API key started, its key's own (`key_folder`), so one tenant's
    runs never read, change or fill up what another's wrote.

    Not created here: tools create it on first use, so listing tools has no side effects.
    """
    path = Path(ctx.snapshot.project.sandbox)
    if not path.is_absolute():
        path = Path(ctx.snapshot.root) / path
    return key_folder(path, ctx.owner).resolve()


def key_folder(sandbox: Path, owner: str) -> Path:
    """The folder the runs of key `owner` (its hash, `fim.server.callers.key_owner`) work in:
    `<sandbox>-keys/<id>` beside the project's sandbox folder `sandbox` (not inside it, where
    a run no key started, whose `file_ops` is rooted there, would reach every key's files);
    `sandbox` itself for no key."""
    if not owner:
        return sandbox
    return sandbox.parent / f"{sandbox.name}-keys" / hashlib.sha256(owner.encode()).hexdigest()[:24]
