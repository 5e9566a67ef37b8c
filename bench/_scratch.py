"""A benchmark's scratch dir: where its jobs run, gone when it ends.

Its job roots are recorded in an index of its own (``JUPYTER_DATA_DIR`` inside the dir), so the
user's JupyterLab and ``jupyter disttrain list`` never show a benchmark's jobs, neither while it
runs nor after (a root whose dir is gone is dropped from any index that kept it).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path


def scratch(prefix: str) -> Path:
    """A new dir named ``prefix...``, removed at exit; set ``JUPYTER_DATA_DIR`` before any job
    (or kernel, whose env is copied from this process) starts."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ["JUPYTER_DATA_DIR"] = str(work / "jupyter-data")
    atexit.register(shutil.rmtree, work, True)
    return work
