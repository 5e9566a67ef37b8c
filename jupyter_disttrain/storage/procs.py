"""Finding and stopping every process of a job, and telling a live process from a reused pid.

Each training process carries ``DISTTRAIN_JOB_ID`` in its environment, so the processes of a
job can be found even when their parents died and they were re-parented. psutil is imported
here only, never at ``%load_ext``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

from ..runtime import contract

JOB_ENV = contract.JOB_ID_ENV
JOB_DIR_ENV = contract.JOB_DIR_ENV
# A local job's launcher: ``python -m LAUNCHER_MODULE JOB_DIR`` (it carries no job env of its own).
LAUNCHER_MODULE = "jupyter_disttrain.backends.local.launch"
# Every name a launcher ran under, so jobs started by an earlier version are still found.
LAUNCHER_MODULES = (LAUNCHER_MODULE, "jupyter_disttrain.backends.local_launch")
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1


def become_subreaper() -> None:
    """Adopt orphaned descendants (Linux), so a dying agent's workers stay in our tree."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def parent_death_signal(sig: int) -> None:
    """Have the kernel send this process ``sig`` when its parent ends, even by SIGKILL (Linux;
    0: no longer). It is kept across ``exec``."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)


def process_identity(pid: int) -> dict[str, Any]:
    """A pid plus its start time: together they name one process, even after pid reuse."""
    return {"pid": pid, "create_time": psutil.Process(pid).create_time()}


def is_alive(identity: dict[str, Any]) -> bool:
    try:
        proc = psutil.Process(int(identity["pid"]))
        return (
            abs(proc.create_time() - float(identity["create_time"])) < 0.01
            and proc.status() != psutil.STATUS_ZOMBIE
        )
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def runs_job(pid: int, job_id: str) -> bool:
    """Whether process ``pid`` is alive and belongs to job ``job_id`` (its environment says so)."""
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(JOB_ENV) == job_id
    except psutil.Error:
        return False


def job_processes(job_id: str, exclude: Iterable[int] = ()) -> list[psutil.Process]:
    """Every process (of this user) whose environment names ``job_id``."""
    skip = {os.getpid(), *exclude}
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid in skip:
            continue
        try:
            if proc.environ().get(JOB_ENV) == job_id:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def works_for(job_id: str, job_dir: Path | str) -> bool:
    """Whether a process of this user works for the job: its launcher (named by its command line:
    it carries no job env) or a process whose environment names ``job_id``."""
    want = os.path.realpath(job_dir)
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == os.getpid():
            continue
        try:
            launcher = _launcher_dir(proc.cmdline())
            if launcher is not None and os.path.realpath(launcher) == want:
                return True
            if proc.environ().get(JOB_ENV) == job_id:
                return True
        except (psutil.Error, OSError):
            continue  # another user's process, or one that just ended
    return False


def stop_processes(procs: list[psutil.Process], grace: float) -> list[psutil.Process]:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL what is left. Returns the killed ones."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)
    return alive


def is_follower(proc: psutil.Process) -> bool:
    """Whether ``proc`` is a run's TensorBoard follower (``python -c ENTRY METRICS LOGDIR``)."""
    try:
        cmdline = proc.cmdline()
    except psutil.Error:
        return False
    return len(cmdline) >= 4 and cmdline[-3] == contract.FOLLOWER_ENTRY


def wait_gone(job_id: str, timeout: float) -> bool:
    """Wait until no process of ``job_id`` is left; True when none is."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not job_processes(job_id):
            return True
        time.sleep(0.1)
    return not job_processes(job_id)


def _launcher_dir(cmdline: list[str]) -> str | None:
    """The job dir of a launcher's command line (``python -m LAUNCHER_MODULE JOB_DIR``), else None."""
    if len(cmdline) >= 3 and cmdline[-3] == "-m" and cmdline[-2] in LAUNCHER_MODULES:
        return cmdline[-1]
    return None


def _job_dir_of(proc: psutil.Process) -> str | None:
    """The job dir a process works for: a rank's or agent's env, or a launcher's argument."""
    return _launcher_dir(proc.cmdline()) or proc.environ().get(JOB_DIR_ENV)


def orphans() -> dict[str, list[psutil.Process]]:
    """This user's job processes whose job dir is gone (removed by hand while they ran), by dir."""
    found: dict[str, list[psutil.Process]] = {}
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        try:
            job_dir = _job_dir_of(proc)
        except (psutil.Error, OSError):
            continue  # another user's process, or one that just ended
        if job_dir and not os.path.exists(os.path.join(job_dir, "job.json")):
            found.setdefault(job_dir, []).append(proc)
    return found
