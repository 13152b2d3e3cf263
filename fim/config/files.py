"""Reading project files: folder listings, a stat cache for reloads, UTF-8 decoding.

Every problem (a broken symlink, a file that is not UTF-8) is recorded on the load's
`Declarations` rather than raised, like everything the loader finds. Every byte read feeds
the snapshot digest.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from fim.errors import Problem

if TYPE_CHECKING:
    from fim.config.loader import Declarations


def list_files(
    decls: Declarations, folder: Path, suffixes: tuple[str, ...]
) -> list[tuple[str, Problem | None]]:
    """Paths of the files in `folder` with one of `suffixes`, sorted; broken symlinks come
    back as problems instead of being skipped silently (a symlink loop looks like a missing
    file). Paths stay strings: pathlib objects cost a reload of 2,000 files 20 ms. Each
    file's stat is kept for `_read_bytes`."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    except OSError as exc:
        return [(str(folder), os_problem(decls, folder, exc))]
    out: list[tuple[str, Problem | None]] = []
    for entry in entries:
        if entry.name.startswith(".") or not entry.name.endswith(suffixes):
            continue
        path = entry.path
        if (bad_name := not_utf8_name(decls, path)) is not None:
            out.append((path, bad_name))
            continue
        try:
            st = entry.stat()
        except OSError as exc:
            out.append((path, os_problem(decls, path, exc)))
            continue
        if stat.S_ISREG(st.st_mode):
            decls.stats[path] = st
            out.append((path, None))
    return out


def not_utf8_name(decls: Declarations, path: str | Path) -> Problem | None:
    """The problem of a file name that is not UTF-8 (Python holds its bytes as surrogates),
    or None: hashing or printing that name raised UnicodeEncodeError, a traceback. The
    name is shown with its bad bytes escaped (`\\xff`)."""
    rel = decls.rel(path)
    try:
        rel.encode()
    except UnicodeEncodeError:
        shown = os.fsencode(rel).decode("utf-8", "backslashreplace")
        return Problem(shown, 1, 1, "file name is not valid UTF-8", "rename it")
    return None


def os_problem(decls: Declarations, path: str | Path, exc: OSError) -> Problem:
    rel = decls.rel(path)
    if exc.errno == errno.ELOOP:
        return Problem(
            rel,
            1,
            1,
            "symlink loop (the link points back to itself)",
            "replace the symlink with the file it should point to",
        )
    if exc.errno == errno.ENOENT and os.path.islink(path):
        return Problem(
            rel, 1, 1, f"broken symlink to '{os.readlink(path)}'", "fix or remove the link"
        )
    return Problem(rel, 1, 1, f"cannot read: {exc.strerror or exc}")


Read = tuple[tuple[int, int, int, int], int, bytes]
"""(mtime_ns, ctime_ns, size, inode) of a file, when it was read (ns), and its bytes."""
_RAW: dict[str, Read] = {}
"""Bytes of the previous load by path, with the (mtime_ns, ctime_ns, size, inode) they were
read under and when they were read. A reload of a big project stats every file instead of
reading it (ctime catches `cp -p` and `touch -d`, which set an old mtime); entries not seen
in a load are dropped."""
_RACY_NS = 2_000_000_000
"""A file modified this close to when it was read may change again within one timestamp
tick of a coarse file system (2 s on FAT): it is always read again (git's racy-clean rule)."""
_RACY_FINE_NS = 50_000_000
"""The window for a file whose timestamps have a sub-second part, so its file system keeps
fine ones (ext4, xfs, btrfs, tmpfs, APFS, NTFS: stamped from a clock that ticks every 1-10
ms). Without it, every reload in the 2 s after a checkout or a generator rewrote a
1,000-agent project read all 2,000 files again."""


def _racy_ns(st: os.stat_result) -> int:
    """How close to its last change a file must not be read to be trusted by its stat."""
    if st.st_mtime_ns % 1_000_000_000 or st.st_ctime_ns % 1_000_000_000:
        return min(_RACY_NS, _RACY_FINE_NS)
    return _RACY_NS  # whole seconds: a coarse file system (FAT, HFS+, ext3), or a 1e-9 chance


MAX_FILE_BYTES = 64 * 2**20
"""The most fim reads of one project file (a generated connector of GitHub's whole API is a
few MB): past it the file is a problem, not a read that grows with whatever it holds."""


def _regular(st: os.stat_result, limit: int | None = None) -> None:
    """A project file must be a regular file of a bounded size: a SKILL.md linked to
    `/dev/zero` was read until memory ran out, and a FIFO blocked the load (and a server's
    reload) for good. Raised as `OSError`, which the caller records as the file's problem."""
    limit = MAX_FILE_BYTES if limit is None else limit
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or socket)")
    if st.st_size > limit:
        raise _too_big(limit)


def _too_big(limit: int) -> OSError:
    size = f"{limit // 2**20} MiB" if limit >= 2**20 else f"{limit // 1024} KiB"
    return OSError(errno.EFBIG, f"larger than {size}, the most fim reads")


def read_regular(
    name: str | Path, limit: int | None = None, *, follow_links: bool = True
) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file of at most `limit` bytes, and its stat: opened without
    blocking (a FIFO put there must not hold the caller) and, with `follow_links=False`,
    without following a link; checked on the descriptor that is read. `OSError` otherwise
    (`EINVAL`: not a regular file; `EFBIG`: larger than `limit`, `MAX_FILE_BYTES` if None)."""
    limit = MAX_FILE_BYTES if limit is None else limit
    extra = os.O_NONBLOCK | (0 if follow_links else getattr(os, "O_NOFOLLOW", 0))
    with open(name, "rb", opener=lambda path, flags: os.open(path, flags | extra)) as fh:
        st = os.fstat(fh.fileno())
        _regular(st, limit)
        raw = fh.read(limit + 1)
    if len(raw) > limit:  # grew since the stat
        raise _too_big(limit)
    return raw, st


def _read_bytes(decls: Declarations, path: str | Path) -> bytes:
    name = str(path)
    st = decls.stats.pop(name, None) or os.stat(name)
    _regular(st)
    key = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
    changed_at = max(st.st_mtime_ns, st.st_ctime_ns)
    cached = _RAW.get(name)
    if cached is not None and cached[0] == key and changed_at < cached[1] - _racy_ns(st):
        decls.raw[name] = cached
        return cached[2]
    read_at = time.time_ns()
    raw, _ = read_regular(name)  # a FIFO put there since the stat must not hold the load
    if cached is not None and cached[2] == raw:
        raw = cached[2]  # unchanged after all: the same object keeps its decoded text
    decls.raw[name] = (key, read_at, raw)
    return raw


_TEXT: dict[str, tuple[bytes, str]] = {}
"""The text each path decoded to in the previous load, reused while its bytes are the same
object (`_RAW` handed them back): the same `str` keeps its hash, so the loader's parse cache
finds it without hashing the text again."""


def read_text(decls: Declarations, path: str | Path, rel: str | None = None) -> str | None:
    """The file's text (`rel`: its project-relative path, when the caller has it)."""
    rel = decls.rel(path) if rel is None else rel
    try:
        raw = _read_bytes(decls, path)
    except OSError as exc:
        decls.problems.append(os_problem(decls, path, exc))
        return None
    digest = decls.digest
    digest.update(rel.encode(errors="surrogateescape"))
    digest.update(b"\0")
    digest.update(raw)
    digest.update(b"\0")
    name = str(path)
    known = _TEXT.get(name)
    if known is not None and known[0] is raw:
        decls.texts[name] = known
        return known[1]
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        decls.problems.append(not_utf8(rel, raw, exc, "save the file as UTF-8"))
        return None
    decls.texts[name] = (raw, text)
    return text


def not_utf8(rel: str, raw: bytes, exc: UnicodeDecodeError, hint: str) -> Problem:
    """The problem of a file that is not UTF-8, at the line and column of its first bad byte."""
    before = raw[: exc.start]
    line = before.count(b"\n") + 1
    col = exc.start - (before.rfind(b"\n") + 1) + 1
    return Problem(rel, line, col, f"file is not valid UTF-8 (byte 0x{raw[exc.start]:02x})", hint)


def keep_reads(reads: dict[str, Read]) -> None:
    """Remember what a finished load read, for the next load's stat checks; files it did
    not read (deleted, renamed) are forgotten."""
    _RAW.clear()
    _RAW.update(reads)


def keep_texts(texts: dict[str, tuple[bytes, str]]) -> None:
    """Remember the texts a finished load decoded (see `_TEXT`); others are forgotten."""
    _TEXT.clear()
    _TEXT.update(texts)


class LinkRefused(OSError):
    """A folder on the way to a file fim writes, under the folder it was asked to write
    in, is a link: a prepared checkout (a committed `.fim` or `.vscode` link) would have
    fim write, or narrow the mode of, whatever it points to."""

    def __init__(self, link: Path) -> None:
        super().__init__(errno.ELOOP, f"{link} is a link; fim does not write through links")
        self.filename = str(link)


def write_inside(base: Path, path: Path, text: str) -> None:
    """Write `text` to `path`, a file under `base`, without following a link: each folder
    from `base` down must be a real folder (made if missing), and the file is written to
    a new file renamed over the old one, so a link in its place is replaced, never written
    through. `LinkRefused` (an OSError) otherwise."""
    folder = base
    for part in path.relative_to(base).parts[:-1]:
        folder = folder / part
        if folder.is_symlink():
            raise LinkRefused(folder)
        folder.mkdir(exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


__all__ = [
    "LinkRefused",
    "Read",
    "keep_reads",
    "keep_texts",
    "list_files",
    "not_utf8",
    "not_utf8_name",
    "os_problem",
    "read_text",
    "write_inside",
]
