"""A Slurm job's status: the job dir's records merged with what Slurm says now.

The job dir is the truth while the launcher runs (replicas, events, the job's own end); Slurm
is the truth about what the launcher cannot see: the queue (pending, and why), a stop Slurm
made (time limit, preemption, a failed node, an ``scancel`` from a terminal), a launcher that
never started or died. Once Slurm forgets a job (``MinJobAge`` after it ended) only the job
dir is left: the launcher's record of a stop says what it can. Pure, like ``states.py``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...model.specs import JobPhase, JobStatus
from ...storage.store import read_json
from .parse import SlurmJob
from .request import STEP
from .states import BUSY_FLAGS, REQUEUE_FLAGS, Verdict, verdict

# The batch script failed and wrote nothing where it writes (launcher.log in the job dir).
NO_OUTPUT = (
    "; it wrote nothing into launcher.log: do the nodes see the job dir (a filesystem they share "
    "with the notebook) and this kernel's Python at the same path?"
)


@dataclass(frozen=True)
class Seen:
    """What a reader found besides the job dir's status."""

    what: str  # "Slurm job 123" / "allocation 123": how messages name the Slurm job
    mode: str  # request.BATCH or request.STEP
    job: SlurmJob | None  # Slurm's answer; None: Slurm does not know the job (any more)
    stopped: dict[str, Any] | None = None  # the launcher's record of a stop it did not ask for
    launcher_alive: bool | None = None  # STEP: whether the launcher beside the kernel lives
    launcher_line: str | None = None  # the last line of launcher.log


def merge(status: JobStatus, seen: Seen) -> JobStatus:
    """``status`` (not ended) as it stands given what Slurm says (never written here)."""
    job = seen.job
    if job is None:
        return _forgotten(status, seen)
    found = verdict(job, seen.what)
    if found.phase is JobPhase.PENDING:
        requeued = job.restarts > 0 or bool(set(job.flags) & REQUEUE_FLAGS)
        if status.phase is JobPhase.PENDING or requeued:
            return _view(status, JobPhase.PENDING, found.reason, found.message)
        return status
    if found.phase is JobPhase.RUNNING:
        if seen.mode == STEP and seen.launcher_alive is False:
            return _lost(status, seen, "the job's launcher beside the kernel ended without a result")
        if status.phase is JobPhase.PENDING and seen.mode != STEP:
            where = f" on {job.batch_host}" if job.batch_host else ""
            return _view(
                status, JobPhase.PENDING, "Starting", f"{seen.what} runs{where}; its launcher is starting"
            )
        return status
    if set(job.flags) & BUSY_FLAGS:
        return status  # still completing: the launcher is stopping the job and records what it sees
    if seen.mode == STEP and seen.launcher_alive:
        return status  # the allocation ended: the launcher, whose steps went with it, says so itself
    message = found.message or ""
    if found.reason == "FAILED":
        message += f": {seen.launcher_line}" if seen.launcher_line else NO_OUTPUT
    if seen.mode == STEP:
        message = f"its allocation ended: {message}"
    return ended(status, Verdict(found.phase, found.reason, message))


def read_dict(path: Path) -> dict[str, Any] | None:
    """A small JSON record of the job dir (a node's, the launcher's), None when absent or torn."""
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _forgotten(status: JobStatus, seen: Seen) -> JobStatus:
    if seen.stopped:
        if seen.stopped.get("reason") == "TimeLimit":
            return ended(
                status, Verdict(JobPhase.FAILED, "TIMEOUT", f"{seen.what} was stopped at its time limit")
            )
        said = seen.stopped.get("state") or "no reason it gave"
        sent = seen.stopped.get("signal", "SIGTERM")
        message = (
            f"Slurm stopped {seen.what} ({sent} to its launcher; Slurm said: {said}) "
            "and no longer knows why; with accounting, sacct would"
        )
        return ended(status, Verdict(JobPhase.FAILED, "SlurmStopped", message))
    if status.phase is JobPhase.PENDING and status.start_time is None:
        message = f"{seen.what} left Slurm's queue without starting (cancelled outside jupyter_disttrain?)"
        return ended(status, Verdict(JobPhase.FAILED, "Vanished", message))
    return _lost(status, seen, f"Slurm no longer knows {seen.what}, and its launcher left no result")


def _lost(status: JobStatus, seen: Seen, message: str) -> JobStatus:
    if seen.launcher_line:
        message += f": {seen.launcher_line}"
    return ended(status, Verdict(JobPhase.FAILED, "LauncherLost", message))


def _view(status: JobStatus, phase: JobPhase, reason: str | None, message: str | None) -> JobStatus:
    view = copy.deepcopy(status)
    view.phase, view.reason, view.message = phase, reason, message
    return view


def ended(status: JobStatus, found: Verdict) -> JobStatus:
    """``status`` ended as ``found`` says, each replica still going with it."""
    view = copy.deepcopy(status)
    view.end(found.phase, found.reason, found.message)
    for rep in view.replicas:
        if not rep.phase.is_terminal:
            rep.phase, rep.ready = found.phase, False
            rep.reason = found.reason
            rep.finish_time = rep.finish_time or view.finish_time
    return view
