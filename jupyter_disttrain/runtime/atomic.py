"""Files replaced in one rename: a reader sees the old content or the new one, never a mix.

Every JSON record of a job is written here, by whichever process owns it: the job store
(``job.json``, ``status.json``), the launcher (``launcher.json``), the rank wrapper
(``ranks/<replica>.json``) and ``em`` (``run.json``, artifact manifests). Standard library
only: the training processes import it. (``sampler.py`` keeps its own two renames: its source
is shipped whole in front of the Kubernetes pod wrapper, so it imports nothing of ours.)
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import threading
from typing import Any

TYPE_CHECKING = False  # not typing's: the rank wrapper imports this module as every rank starts
if TYPE_CHECKING:
    from collections.abc import Callable


def write_atomic(
    path: str | os.PathLike[str], data: bytes, *, durable: bool = False, mode: int = 0o666
) -> None:
    """Write ``data`` to a hidden temporary file beside ``path`` (named for this process and
    thread, ending in ``.tmp``), then rename it over ``path``. ``durable``: on disk before the
    rename, so a crash of the machine leaves the old file or the new one, not an empty one.
    ``mode``: the file's permissions, less the umask (``open``'s by default)."""
    path = os.fspath(path)
    folder, name = os.path.split(path)
    os.makedirs(folder or ".", exist_ok=True)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            view = memoryview(data)
            while view:  # a regular file may take less than all of it (a nearly full disk)
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json(
    path: str | os.PathLike[str],
    data: Any,
    *,
    durable: bool = False,
    mode: int = 0o666,
    default: Callable[[Any], Any] | None = None,
) -> None:
    """``data`` as JSON (indented one space: people read these files too), replaced atomically
    (``write_atomic``). ``default`` turns what JSON cannot hold into what it can."""
    text = json.dumps(data, indent=1, default=default).encode("utf-8")
    write_atomic(path, text, durable=durable, mode=mode)


def open_own(path: str | os.PathLike[str], mode: int = 0o644) -> int:
    """A descriptor of ``path`` opened for appending (made if missing), never through a link
    someone who can write to the job root planted there: a symbolic one fails with ELOOP, a
    hard one (a second name for another file) or a device with EMLINK. Logs are opened so."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise OSError(errno.EMLINK, f"{os.fspath(path)} is not a file of its own (a link or a device)")
    return fd
