"""A job's launcher started from the kernel or the server, in a session of its own."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from ...model.errors import BackendError
from ...storage.logfiles import last_line
from .supervisor import LAUNCHER_FILE

# Seconds a cold launcher gets to record itself once its agents started, on a loaded machine.
# A launcher that exits before that is seen at once (its exit code, launcher.log's last line).
START_TIMEOUT = 30.0


def spawn_launcher(job_dir: Path, module: str, timeout: float = START_TIMEOUT) -> None:
    """Start a job's launcher, ``python -m MODULE JOB_DIR``, in a session of its own (it outlives
    the kernel and its process group); return once it has recorded itself in the job dir."""
    log = open(job_dir / "launcher.log", "ab")  # noqa: SIM115
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, str(job_dir)],
            cwd=job_dir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log.close()
    deadline = time.monotonic() + timeout
    while not (job_dir / LAUNCHER_FILE).exists():
        if proc.poll() is not None:
            detail = last_line(job_dir / "launcher.log") or f"exit code {proc.returncode}"
            raise BackendError(f"the job launcher exited at once: {detail}")
        if time.monotonic() > deadline:
            proc.kill()
            raise BackendError(
                f"the job launcher did not start within {timeout:.0f} s; see launcher.log in the job dir"
            )
        time.sleep(0.005)
