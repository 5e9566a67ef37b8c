"""``--pending-timeout``: a job whose pods cannot all start fails with the reason, not waits forever.

``activeDeadlineSeconds`` does not fit: it counts from the Job's start whether the pods run or
not (a long training run would need a long deadline, which then does not catch a stuck start),
and PyTorchJob and T9k have their own fields. So the backend keeps the clock: from submission
while no pod has run, else from when this process first saw a replica waiting.
"""

from __future__ import annotations

import time
from typing import Any

from ...specs import Event, JobPhase, JobStatus, iso_seconds, now_iso


class PendingClock:
    """When each job started waiting for a replica to start (per process)."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def overdue(self, status: JobStatus, workload: dict[str, Any] | None, timeout: float) -> bool:
        """Whether ``status`` has had a replica waiting to start for more than ``timeout`` seconds.
        A suspended workload (queued by Kueue) is not waiting for its pods but for its turn."""
        suspended = bool((workload or {}).get("spec", {}).get("suspend"))
        waiting = any(r.phase is JobPhase.PENDING for r in status.replicas)
        if timeout <= 0 or status.is_terminal or suspended or not waiting:
            self._since.pop(status.job_id, None)
            return False
        never_ran = status.start_time is None and status.created
        start = iso_seconds(status.created) if never_ran and status.created else time.time()
        return time.time() - self._since.setdefault(status.job_id, start) > timeout


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
