"""The job's end as its pods recorded it in the shared job dir (``exits/<replica>.json``).

A finished Job can be removed by its TTL (and its pods with it) before anyone asked how it
ended, say for a detached job; the pod wrapper's records then tell. Rank 0's record is the
job's verdict, as the Job's ``successPolicy`` makes rank 0's end the job's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...model.specs import Event, JobPhase, JobStatus, now_iso
from ...runtime import contract


def read_exits(job_dir: Path) -> dict[str, dict[str, Any]]:
    """Replica name → its wrapper's record (exit_code, finish_time, signal); empty when none."""
    out = {}
    for path in sorted((job_dir / contract.EXITS_DIR).glob("*.json")):
        try:
            out[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError):  # half-written by a pod that died mid-write: no verdict
            continue
    return out


def status_from_exits(
    prev: JobStatus, rank0: str | None, exits: dict[str, dict[str, Any]], gone: str
) -> JobStatus | None:
    """The final status from the exit records, or ``None`` when rank 0 (the replica named
    ``rank0``; None when the flavour's pods leave no records) left none. ``gone`` says what was
    removed (for the message)."""
    if rank0 is None or rank0 not in exits:
        return None
    verdict = exits[rank0]
    status = JobStatus.from_dict(prev.to_dict())
    for rep in status.replicas:
        rec = exits.get(rep.name)
        if rec is None or rec.get("signal"):  # stopped from outside once the job had ended
            rep.phase, rep.reason = JobPhase.CANCELLED, "Stopped"
            continue
        rep.exit_code = int(rec["exit_code"])
        rep.phase = JobPhase.SUCCEEDED if rep.exit_code == 0 else JobPhase.FAILED
        rep.reason = "Completed" if rep.exit_code == 0 else "Error"
        rep.finish_time = rec.get("finish_time")
    failed = sorted(
        (r for r in status.replicas if r.phase is JobPhase.FAILED), key=lambda r: r.finish_time or ""
    )
    if int(verdict["exit_code"]) == 0:
        phase, reason, status.exit_code = JobPhase.SUCCEEDED, "Completed", 0
        message = f"{gone}; rank 0 recorded a clean exit in the job dir"
    else:
        first = failed[0] if failed else None
        phase, reason = JobPhase.FAILED, "Error"
        status.exit_code = first.exit_code if first else int(verdict["exit_code"])
        name = first.name if first else rank0
        message = f"{gone}; replica {name} failed (exit code {status.exit_code}), as recorded in the job dir"
    status.end(phase, reason, message, at=verdict.get("finish_time"))
    status.events.append(Event(now_iso(), "Normal", "ExitRecords", message))
    return status
