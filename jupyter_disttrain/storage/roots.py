"""Which job roots a user has: the per-user index of them.

Jobs live next to the notebooks that made them (``<dir>/.disttrain/jobs``), so a user who works
in several directories has several roots. Creating a job records its root in a per-user index,
``<jupyter data dir>/disttrain/job-roots.json`` (most recently used first, bounded, roots that
no longer exist dropped). Readers (``jupyter disttrain``, the server's job list) search the
default root and every indexed root, unless ``--root`` / the server's ``job_root`` /
``$DISTTRAIN_JOB_ROOT`` names one root: then that root alone (``store.open_store`` decides).
The store builds on this module, not the other way round.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ..runtime.atomic import write_json

log = logging.getLogger(__name__)

INDEX_NAME = "job-roots.json"
MAX_ROOTS = 64
MAX_INDEX_BYTES = 256 * 1024  # 64 paths of 4 KiB: a bigger file is not ours to trust


def index_file() -> Path:
    """Where the index is: under the Jupyter data dir (``$JUPYTER_DATA_DIR`` moves it)."""
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "disttrain" / INDEX_NAME


def _read_index(path: Path) -> list[str]:
    """The recorded roots, or none if the file is missing, too big or not an index."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_INDEX_BYTES + 1)
    except OSError:
        return []
    if len(data) > MAX_INDEX_BYTES:
        return []
    try:
        roots = json.loads(data).get("roots", [])
    except (ValueError, AttributeError):
        return []
    return [r for r in roots if isinstance(r, str) and os.path.isabs(r)][:MAX_ROOTS]


def remember_root(root: Path) -> None:
    """Record ``root`` first in the index. A job must not fail for the index's sake: an error
    is logged, not raised. Two writers at once may drop one's entry; its next job records it."""
    path = index_file()
    roots = _read_index(path)
    if roots[:1] == [str(root)]:
        return  # the usual case, a job in the same root again: no write
    kept = [r for r in roots if r != str(root) and os.path.isdir(r)]
    try:
        # replaced atomically and readable by its owner only, as the store's own records are
        write_json(path, {"roots": [str(root), *kept][:MAX_ROOTS]}, durable=True, mode=0o600)
    except OSError as exc:
        log.warning("could not record the job root %s in %s: %s", root, path, exc)


def known_roots() -> list[Path]:
    """Indexed roots that still exist, most recently used first."""
    return [Path(r) for r in _read_index(index_file()) if os.path.isdir(r)]
