"""The server's caching store never serves a stale or shared record or status."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_disttrain.errors import UnknownJobError
from jupyter_disttrain.server.cache import CachingJobStore
from jupyter_disttrain.specs import JobPhase, JobSpec, JobStatus, ReplicaStatus
from jupyter_disttrain.store import JobRecord, JobStore


def test_reads_follow_every_write_and_copies_are_independent(tmp_path: Path) -> None:
    writer = JobStore(tmp_path / "jobs")  # another process, as a launcher would be
    cached = CachingJobStore(writer.root)
    record = JobRecord(id=writer.new_job_id("c"), spec=JobSpec(name="c"))
    writer.create(record, "print(1)\n")
    assert cached.read_status(record.id) is None

    writer.write_status(JobStatus(job_id=record.id, replicas=[ReplicaStatus(name="rank-0")]))
    first = cached.read_status(record.id)
    assert first is not None and first.phase is JobPhase.PENDING
    first.phase = JobPhase.FAILED
    first.replicas[0].phase = JobPhase.FAILED  # a caller's edits stay its own
    again = cached.read_status(record.id)
    assert again is not None and again.phase is JobPhase.PENDING
    assert again.replicas[0].phase is JobPhase.PENDING

    for phase in (JobPhase.RUNNING, JobPhase.SUCCEEDED):
        writer.write_status(JobStatus(job_id=record.id, phase=phase))
        latest = cached.read_status(record.id)
        assert latest is not None and latest.phase is phase

    mine = cached.read_record(record.id)
    mine.backend_state["x"] = 1
    assert cached.read_record(record.id).backend_state == {}
    record.backend_state["pod"] = "p-0"
    writer.write_record(record)
    assert cached.read_record(record.id).backend_state == {"pod": "p-0"}

    cached.purge(record.id)
    with pytest.raises(UnknownJobError):
        cached.read_record(record.id)
    with pytest.raises(UnknownJobError):
        cached.read_status(record.id)
