"""The root cause of an ended job and its one-line error."""

from __future__ import annotations

from jupyter_disttrain.model.failure import failure_line, root_cause
from jupyter_disttrain.model.specs import JobPhase, JobStatus, ReplicaStatus


def _rank(i: int, phase: JobPhase, code: int | None, finish: str | None) -> ReplicaStatus:
    return ReplicaStatus(name=f"rank-{i}", index=i, phase=phase, exit_code=code, finish_time=finish)


RANKS = [
    _rank(0, JobPhase.FAILED, 1, "2026-01-01T00:00:05.000Z"),  # died of its peer leaving
    _rank(1, JobPhase.FAILED, None, "2026-01-01T00:00:01.000Z"),  # stopped, no exit of its own
    _rank(10, JobPhase.FAILED, 1, "2026-01-01T00:00:02.000Z"),  # failed first
    _rank(11, JobPhase.SUCCEEDED, 0, "2026-01-01T00:00:00.000Z"),
]


def test_the_rank_the_message_names_is_the_root_cause_whole_word_only() -> None:
    status = JobStatus(job_id="j", phase=JobPhase.FAILED, replicas=RANKS, message="rank-1 exited: boom")
    assert root_cause(status) is RANKS[1]  # not rank-10 or rank-11
    assert failure_line(status) == "job j Failed: rank-1 exited: boom"


def test_without_a_named_rank_the_first_to_fail_with_an_exit_code_is_the_cause() -> None:
    status = JobStatus(job_id="j", phase=JobPhase.FAILED, reason="Error", replicas=RANKS, message="x\ny")
    assert root_cause(status) is RANKS[2]
    assert failure_line(status) == "job j Failed (Error): x (root cause: rank-10)"


def test_a_cancelled_job_has_no_root_cause_and_a_long_message_is_cut() -> None:
    status = JobStatus(job_id="j", phase=JobPhase.CANCELLED, reason="Cancelled", message="m" * 1000)
    assert root_cause(status) is None
    line = failure_line(status)
    assert line.startswith("job j Cancelled (Cancelled): mmm") and len(line) == 300
