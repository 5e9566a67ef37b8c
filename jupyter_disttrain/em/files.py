"""The run directory's writes: whole JSON records, whole JSONL lines, copied files.

A reader (the server, a notebook, another rank) may look at any moment, even while the writer
dies: records are replaced in one rename, metric lines are appended in one write each batch,
and an artifact file appears under its name only once it is completely copied.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from ..runtime import atomic

_CHUNK = 1 << 20


def write_json(path: Path, data: Any) -> None:
    """A record of the run, replaced in one rename; what JSON cannot hold is written as text."""
    atomic.write_json(path, data, default=str)


def read_record(path: Path, limit: int = 1 << 20) -> dict[str, Any] | None:
    """A record written earlier (a run continued by a restart), or None when missing or unreadable."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
        found = json.loads(data) if len(data) <= limit else None
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def append_text(path: Path, data: str) -> None:
    """Append whole lines in one ``write`` on an O_APPEND file: a crash leaves whole lines (or,
    at worst, a last line without its newline, which readers skip)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        view = memoryview(data.encode("utf-8"))
        while view:  # a regular file may take less than all of it (a nearly full disk)
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def copy_file(source: Path, target: Path) -> tuple[int, str]:
    """Copy ``source``'s bytes (never a link) to ``target``; returns (size, sha256)."""
    digest = hashlib.sha256()
    size = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(source, "rb") as src, open(tmp, "wb") as dst:
            while chunk := src.read(_CHUNK):
                digest.update(chunk)
                dst.write(chunk)
                size += len(chunk)
        shutil.copymode(source, tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return size, digest.hexdigest()
