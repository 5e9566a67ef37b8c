"""Open files of a job directory without following a link out of it.

Anyone who can write to the job root could plant ``logs/x.log -> ~/.ssh/id_rsa`` or a job dir
that links into another root; readers would then serve, and delete would write to, whatever
the link names. The job directories and everything in them are therefore taken as they are:
a symbolic link is never followed (``O_NOFOLLOW`` on the last component, ``lstat`` on the
directories above it up to the job root), and only a regular file is read: the open does not
block, so a FIFO planted in a job dir is refused rather than waited on.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from ..runtime.regularfile import fd_beneath, open_fd


def _opener(path: str, flags: int) -> int:
    # Non-blocking until the check: a FIFO would block the open itself, before any check.
    return open_fd(path, flags)


def open_regular(path: str | os.PathLike[str], mode: str = "rb", **kwargs: Any) -> IO[Any]:
    """``open`` that refuses a symbolic link (``OSError`` ELOOP) or anything but a regular file."""
    return open(path, mode, opener=_opener, **kwargs)  # the caller closes it


def open_beneath(root: str | os.PathLike[str], parts: Sequence[str]) -> IO[bytes]:
    """Open the regular file ``root/parts[0]/.../parts[-1]`` for reading, one component at a time
    with ``O_NOFOLLOW`` from the directory before it (``regularfile.fd_beneath``): no component may
    be a symbolic link (or ``..``), and a link swapped in between a check and the open cannot lead
    out of ``root``."""
    return os.fdopen(fd_beneath(root, parts, os.O_RDONLY), "rb")


def is_real_dir(path: str | os.PathLike[str]) -> bool:
    """A directory that is not a symbolic link."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def is_real_file(path: str | os.PathLike[str]) -> bool:
    """A regular file that is not a symbolic link."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def regular_files(directory: Path, pattern: str) -> list[Path]:
    """The regular files (no links) matching ``pattern`` in ``directory``, itself not a link."""
    if not is_real_dir(directory):
        return []
    return [p for p in directory.glob(pattern) if is_real_file(p)]
