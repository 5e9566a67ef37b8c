"""Another local user reads nothing of a job (its logs, script, run.sh, runs, event files) unless
the job shares it with the directory's group (``--group-access``): the job root and each job dir
are 0700 (0750), whatever mode the writers inside give their files. Checked as uid ``nobody``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to read as another uid (nobody)")

# Writes what a job writes: a log line, an em run with a metric, a TensorBoard event file.
WRITES = """
import os
from jupyter_disttrain import em
from torch.utils.tensorboard import SummaryWriter
print("a secret in the log", flush=True)
em.create_run("r").log("train", {"loss": 1.0}, step=0)
w = SummaryWriter(os.environ["DISTTRAIN_TENSORBOARD_DIR"])
w.add_scalar("loss", 1.0, 0)
w.close()
"""

# Run as nobody (with the given group): which of the paths it can open, or list.
AS_NOBODY = """
import json, os, sys
gid, paths = int(sys.argv[1]), json.loads(sys.argv[2])
os.setgroups([]); os.setgid(gid); os.setuid(65534)
readable = []
for path in paths:
    try:
        os.listdir(path) if os.path.isdir(path) else open(path, "rb").close()
        readable.append(path)
    except PermissionError:
        pass
print(json.dumps(readable))
"""


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A job root in a directory every user may enter (pytest's temp dirs are the owner's alone)."""
    base = Path(tempfile.mkdtemp(prefix="disttrain-modes-"))
    base.chmod(0o755)
    try:
        yield base / "jobs"
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def _readable_by_nobody(paths: list[Path], gid: int = 65534) -> list[str]:
    argv = [sys.executable, "-c", AS_NOBODY, str(gid), json.dumps([str(p) for p in paths])]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    return list(json.loads(done.stdout))


def _finished_job(root: Path, **options: object) -> api.Job:
    job = api.submit(WRITES, store=JobStore(root), gpus=1, accelerator="cpu", options=options)
    status = job.wait(timeout=120)
    assert status.phase is JobPhase.SUCCEEDED, status
    return job


def test_another_user_reads_nothing_of_a_job(open_root: Path) -> None:
    job = _finished_job(open_root)
    files = [p for p in job.dir.rglob("*") if p.is_file()]
    names = {p.relative_to(job.dir).parts[0] for p in files}
    assert {"logs", "runs", "tensorboard", "train.py", "run.sh", "job.json"} <= names, names
    assert _readable_by_nobody([open_root, job.dir, *files]) == []
    assert (open_root.stat().st_mode & 0o777, job.dir.stat().st_mode & 0o777) == (0o700, 0o700)


def test_group_access_lets_the_group_read_and_no_one_else(open_root: Path) -> None:
    job = _finished_job(open_root, group_access=True)
    log = job.dir / "logs" / "rank-0.log"
    assert "a secret in the log" in log.read_text()
    group = job.dir.stat().st_gid
    assert _readable_by_nobody([open_root, job.dir, log], gid=group) == [
        str(open_root),
        str(job.dir),
        str(log),
    ]
    assert _readable_by_nobody([open_root, job.dir, log]) == []  # not in the group
    assert job.dir.stat().st_mode & 0o777 == 0o750
