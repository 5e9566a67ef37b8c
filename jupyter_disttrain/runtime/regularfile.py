"""Open a file for reading only if it is a regular file: no link followed, no FIFO waited on.

A plain ``open()`` of a FIFO blocks until a writer comes, and of a link reads whatever it names:
a ``latest``, a pins file or a ``step_1.pt`` that another user replaced by ``mkfifo`` would hang
the scan that reads it (and the server thread running it). The open is non-blocking and
``O_NOFOLLOW``; the descriptor must be a regular file, and is made blocking again for the read.
Standard library only: the training processes use it too.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from typing import BinaryIO

_FLAGS = os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def open_fd(path: str | os.PathLike[str], flags: int = os.O_RDONLY, dir_fd: int | None = None) -> int:
    """A descriptor of the regular file ``path`` (``OSError``: ELOOP for a link, EISDIR for
    anything but a regular file, a FIFO or a device too)."""
    fd = os.open(path, flags | _FLAGS, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a fifo or a device would block or never end
            raise IsADirectoryError(errno.EISDIR, f"{os.fsdecode(path)} is not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def fd_beneath(root: str | os.PathLike[str], parts: Sequence[str], flags: int) -> int:
    """A descriptor of the regular file ``root/parts[0]/.../parts[-1]``, opened one component at
    a time with ``O_NOFOLLOW`` from the directory before it: no component may be a link (or
    ``..``), and a link swapped in between a check and the open cannot lead out of ``root``."""
    if not parts or any(p in ("", ".", "..") or "/" in p or "\0" in p for p in parts):
        raise ValueError(f"not a path beneath a directory: {'/'.join(parts)!r}")
    cloexec = getattr(os, "O_CLOEXEC", 0)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | cloexec)
    try:
        for part in parts[:-1]:
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | cloexec, dir_fd=fd)
            os.close(fd)
            fd = child
        return open_fd(parts[-1], flags, dir_fd=fd)
    finally:
        os.close(fd)


def open_binary(path: str | os.PathLike[str]) -> BinaryIO:
    """``open(path, "rb")`` of a regular file only."""
    return os.fdopen(open_fd(path), "rb")


def read_head(path: str | os.PathLike[str], limit: int) -> bytes:
    """The first ``limit`` bytes of the regular file ``path``."""
    with open_binary(path) as f:
        return f.read(limit)
