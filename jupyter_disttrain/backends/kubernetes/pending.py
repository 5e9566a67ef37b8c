"""``--pending-timeout``: a job whose pods cannot all start fails with the reason, not waits forever.

``activeDeadlineSeconds`` does not fit: it counts from the Job's start whether the pods run or
not (a long training run would need a long deadline, which then does not catch a stuck start),
and PyTorchJob and T9k have their own fields. So the backend keeps the clock: from submission
while no pod has run, else from when this process first saw a replica waiting.

A job waiting in a queue is never pending too long: Kueue holds its workload suspended, a gang
scheduler (a pod's ``schedulerName`` other than the default's: Volcano, T9k's) leaves its pods
unbound until the whole job fits. A ``schedulingPolicy.queue`` with the default scheduler holds
nothing: pods it cannot place are stuck, and time out. The clock starts when the queue lets it
go. That moment is kept in the status (``Queued`` and ``Admitted`` events of our own), so a
process that did not see the job queued (the Jupyter server, restarted) still knows it: between
Kueue's un-suspend and the controller's ``status.startTime`` the job looks as if it had never run.

Nor is a job pending too long while the cluster works on its pods: a node the autoscaler is
adding, an image being pulled (``status.PROGRESS``). The clock stops meanwhile and counts again
from when that ended (a pod scheduled on the new node, an image pulled).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ...model.specs import Event, JobPhase, JobStatus, iso_seconds, now_iso
from .status import PROGRESS

if TYPE_CHECKING:  # the flavours build on the status module, which this one sits beside
    from .flavors import Flavor

QUEUED, ADMITTED = "Queued", "Admitted"


DEFAULT_SCHEDULER = "default-scheduler"


def queue_hold(flavor: Flavor, workload: dict[str, Any] | None, pods: list[dict[str, Any]]) -> str | None:
    """What holds the job in a queue (its turn, not its pods), or None when nothing does."""
    if workload is None:
        return None
    if flavor.suspended(workload):
        return "the workload is suspended until its queue admits it (Kueue)"
    queue = flavor.gang_queue(workload)
    gangs = sorted({name for p in pods if _unbound(p) and (name := _gang_scheduler(p))})
    if queue and gangs:
        return f"waiting in queue {queue!r} until {', '.join(gangs)} places all its pods"
    return None


def _gang_scheduler(pod: dict[str, Any]) -> str | None:
    """The pod's scheduler when it is not the default one (a gang scheduler holds a queue's pods)."""
    name: str | None = pod.get("spec", {}).get("schedulerName")
    return None if name in (None, "", DEFAULT_SCHEDULER) else name


def _unbound(pod: dict[str, Any]) -> bool:
    return (
        pod.get("status", {}).get("phase", "Pending") == "Pending"
        and not pod.get("spec", {}).get("nodeName")
        and not pod.get("metadata", {}).get("deletionTimestamp")
    )


def note_queue(status: JobStatus, held: str | None) -> None:
    """Record in ``status`` when the job went into a queue and when the queue let it go."""
    if status.is_terminal:
        return
    last = _last(status, QUEUED, ADMITTED)
    if held and (last is None or last.reason == ADMITTED):
        status.events.append(Event(now_iso(), "Normal", QUEUED, held))
    elif not held and last is not None and last.reason == QUEUED:
        message = "the queue let the job go; --pending-timeout counts from now"
        status.events.append(Event(now_iso(), "Normal", ADMITTED, message))


class PendingClock:
    """When each job started waiting for a replica to start (per process)."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}
        self._paused: dict[str, float] = {}  # job id -> when this process last saw its clock stopped

    def overdue(self, status: JobStatus, held: str | None, timeout: float) -> bool:
        """Whether ``status`` has had a replica waiting to start for more than ``timeout`` seconds.
        A job ``held`` in a queue is not waiting for its pods but for its turn, nor is one whose
        pods the cluster works on (a node coming, an image pulling): the clock stops, and counts
        again from when that ended."""
        job = status.job_id
        waiting = [r for r in status.replicas if r.phase is JobPhase.PENDING]
        if timeout <= 0 or status.is_terminal or not waiting:
            self._since.pop(job, None)
            self._paused.pop(job, None)
            return False
        if held or any(r.reason in PROGRESS for r in waiting):
            self._since.pop(job, None)
            self._paused[job] = time.time()
            return False
        since = self._since.setdefault(job, max(_wait_start(status), self._paused.get(job, 0.0)))
        return time.time() - since > timeout


def _wait_start(status: JobStatus) -> float:
    """Since when the job waits: its submission while no pod has run, else now; never before
    its queue let it go."""
    never_ran = status.start_time is None and status.created
    start = iso_seconds(status.created) if never_ran and status.created else time.time()
    admitted = _last(status, ADMITTED)
    return max(start, iso_seconds(admitted.time)) if admitted else start


def _last(status: JobStatus, *reasons: str) -> Event | None:
    """The latest of our own events (not the cluster's) with one of ``reasons``."""
    return next((e for e in reversed(status.events) if e.object is None and e.reason in reasons), None)


def timed_out(status: JobStatus, timeout: float) -> JobStatus:
    """``status`` failed by the pending timeout, with the last reason the cluster gave."""
    out = JobStatus.from_dict(status.to_dict())
    why = out.message or "the cluster gave no reason (check the events)"
    message = f"pods not all started within {_duration(timeout)} (--pending-timeout): {why}"
    out.end(JobPhase.FAILED, out.reason or "PendingTimeout", message)
    for rep in out.replicas:
        if not rep.phase.is_terminal:
            rep.phase, rep.reason = JobPhase.CANCELLED, rep.reason or "Stopped"
    out.events.append(Event(now_iso(), "Warning", "PendingTimeout", message + "; workload deleted"))
    return out


def _duration(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    return f"{seconds / 60:g}m" if seconds % 60 == 0 else f"{seconds:g}s"
