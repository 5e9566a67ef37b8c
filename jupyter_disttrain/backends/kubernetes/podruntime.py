"""The job's own runtime, shipped to its pods: this notebook's ``jupyter_disttrain/runtime``.

The pods run the rank wrapper, a replaced pod's resume and ``--keep-checkpoints`` from the
release that packaged the job, whatever ``jupyter_disttrain`` the image holds: an older one (its
pods used to restart from step 0 without a word) or none. Shipped rather than checked: a
contract level the pod compares could only report that the resume will not happen, and the
runtime is standard library only (``tests/test_layers.py`` keeps it so) and small, so it travels
with the job: a zip in the job dir on the PVC, else in the script's ConfigMap. Python imports
it from the zip as a top-level package of its own, ``disttrain_runtime``, so it never shadows
the image's ``jupyter_disttrain`` (the script's ``em`` and the MLflow follower stay the image's).
"""

from __future__ import annotations

import functools
import io
import posixpath
import zipfile
from pathlib import Path

from ... import runtime

PACKAGE = "disttrain_runtime"
ARCHIVE = "disttrain-runtime.zip"
RANK_WRAPPER = f"{PACKAGE}.worker"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed times: the same release makes the same bytes


@functools.cache
def archive() -> bytes:
    """The runtime package's modules as a zip, under ``PACKAGE``."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path in sorted(Path(runtime.__file__).parent.glob("*.py")):
            info = zipfile.ZipInfo(f"{PACKAGE}/{path.name}", date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, path.read_bytes())
    return buf.getvalue()


def archive_path(files_dir: str) -> str:
    """Where the pods find the archive: beside the script (the job dir, or the ConfigMap's mount)."""
    return posixpath.join(files_dir, ARCHIVE)
