"""The server's caching store never serves a stale or shared record or status."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_disttrain.model.errors import UnknownJobError
from jupyter_disttrain.model.specs import JobPhase, JobSpec, JobStatus, ReplicaStatus, now_iso
from jupyter_disttrain.server.caching_store import CachingJobStore
from jupyter_disttrain.storage.store import JobRecord, JobStore


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


def test_listing_follows_every_write_while_keeping_ended_jobs(tmp_path: Path) -> None:
    from jupyter_disttrain.server.jobs import JobService

    writer = JobStore(tmp_path / "jobs")  # the launchers and kernels: other processes
    service = JobService(CachingJobStore(writer.root), "local")

    def make(name: str, created: str, phase: JobPhase | None) -> str:
        record = JobRecord(id=writer.new_job_id(name), spec=JobSpec(name=name, accelerator="cpu"))
        record.created = created
        writer.create(record, "print(1)\n")
        if phase is not None:
            writer.write_status(JobStatus(job_id=record.id, phase=phase))
        return record.id

    def listed() -> dict[str, str]:
        return {job["id"]: job["phase"] for job in service.list_jobs()}

    done = make("done", "2026-01-01T00:00:00.000Z", JobPhase.SUCCEEDED)
    pending = make("pending", now_iso(), None)  # young: being launched, not NeverLaunched
    assert [j["id"] for j in service.list_jobs()] == [pending, done]  # newest first
    assert listed() == {pending: "Pending", done: "Succeeded"}
    assert service.list_jobs()[1] is service.list_jobs()[1]  # the ended one is not rebuilt

    writer.write_status(JobStatus(job_id=pending, phase=JobPhase.FAILED, reason="Boom"))
    writer.write_status(JobStatus(job_id=done, phase=JobPhase.FAILED, reason="Rewritten"))
    assert listed() == {pending: "Failed", done: "Failed"}
    assert {j["id"]: j["reason"] for j in service.list_jobs()}[done] == "Rewritten"

    (writer.root / "half-written").mkdir()  # a job dir whose record is not there yet
    writer.mark_deleted(done)
    assert listed() == {pending: "Failed"}
    writer.purge(pending)
    assert listed() == {}
    assert service.manager._ended == {}
