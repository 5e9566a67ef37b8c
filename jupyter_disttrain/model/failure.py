"""What went wrong in an ended job, said once for the cell, the CLI and anything else.

The backend's status message names the root-cause replica when it knows it ("rank-1 exited
with code 1: ..."); otherwise the replica that failed first (by finish time) is the likely
cause, since its peers usually fail only because it left.
"""

from __future__ import annotations

import re

from .specs import JobPhase, JobStatus, ReplicaStatus

MESSAGE_CHARS = 300  # the one-line error stays short; the cell's summary has the details


def first_line(message: str | None) -> str:
    """A status message's headline: messages may carry a rank's traceback after it."""
    return (message or "").strip().split("\n", 1)[0]


def _mention(text: str, name: str) -> int | None:
    """Where ``text`` names replica ``name`` as a whole word ("rank-1", not "rank-10")."""
    m = re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)
    return m.start() if m else None


def root_cause(status: JobStatus) -> ReplicaStatus | None:
    """The replica that made the job fail: named in the message, else the first that failed."""
    message = status.message or ""
    named = [(at, r) for r in status.replicas if (at := _mention(message, r.name)) is not None]
    if named:
        return min(named, key=lambda t: t[0])[1]
    failed = [r for r in status.replicas if r.phase is JobPhase.FAILED and r.exit_code not in (None, 0)]
    return min(failed, key=lambda r: r.finish_time or "~") if failed else None


def failure_line(status: JobStatus) -> str:
    """One line naming the phase, the reason and the root-cause replica of an ended job."""
    detail = first_line(status.message)
    text = f"job {status.job_id} {status.phase.value}"
    if status.reason:
        text += f" ({status.reason})"
    if detail:
        text += f": {detail}"
    if len(text) > MESSAGE_CHARS:
        text = text[: MESSAGE_CHARS - 1] + "…"
    cause = root_cause(status)
    if cause is not None and _mention(text, cause.name) is None:
        text += f" (root cause: {cause.name})"
    return text


def stopped_by_peer(status: JobStatus) -> list[str]:
    """The failed replicas other than the root cause that ended no earlier than it did: they may
    have died because it left (gloo's "Connection closed by peer", stopped by their agent).
    ``failures`` keeps those whose logs show no error of their own: the job's ``Failure``."""
    cause = root_cause(status) if status.phase is JobPhase.FAILED else None
    if cause is None:
        return []
    since = cause.finish_time or ""
    return [
        r.name
        for r in status.replicas
        if r is not cause and r.phase is JobPhase.FAILED and (r.finish_time or "~") >= since
    ]
