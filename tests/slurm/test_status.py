"""A job's status from its job dir and Slurm's answer (pure), for every state in the fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_disttrain.backends.slurm.parse import SlurmJob, parse_squeue_json, parse_squeue_text
from jupyter_disttrain.backends.slurm.request import BATCH, STEP
from jupyter_disttrain.backends.slurm.status import Seen, merge
from jupyter_disttrain.model.specs import JobPhase, JobStatus, ReplicaStatus

FIXTURES = Path(__file__).parent / "fixtures"
LATER = parse_squeue_json((FIXTURES / "slurm-24.11" / "squeue.json").read_text())
REC = parse_squeue_text((FIXTURES / "slurm-22.05.8" / "squeue_ended.txt").read_text())


def running() -> JobStatus:
    status = JobStatus("mnist-abcde", JobPhase.RUNNING, start_time="2026-01-01T00:00:00.000Z")
    status.replicas = [ReplicaStatus("rank-0", phase=JobPhase.RUNNING, ready=True), ReplicaStatus("rank-1")]
    return status


def seen(job: SlurmJob | None, **kw: object) -> Seen:
    return Seen(what=f"Slurm job {job.job_id if job else 9}", mode=BATCH, job=job, **kw)  # type: ignore[arg-type]


PENDING = {
    "101": ("Resources", "waiting for nodes, CPUs, GPUs or memory"),
    "102": ("Priority", "jobs of a higher priority are ahead"),
    "103": ("QOSMaxJobsPerUserLimit", "the QOS lets no more of your jobs run at once"),
    "104": ("ReqNodeNotAvail", "(ReqNodeNotAvail, UnavailableNodes:gpu[3-4])"),
    "105": ("Requeued", "was requeued (restart 1) and waits to run again, partition gpu: held until"),
}


@pytest.mark.parametrize("job_id", sorted(PENDING))
def test_a_pending_job_says_why_in_slurms_words(job_id: str) -> None:
    reason, words = PENDING[job_id]
    status = merge(JobStatus("j", JobPhase.PENDING), seen(LATER[job_id]))
    assert (status.phase, status.reason) == (JobPhase.PENDING, reason)
    assert words in (status.message or "") and status.message.startswith(f"Slurm job {job_id} ")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("job_id", "phase", "reason", "words"),
    [
        ("111", JobPhase.FAILED, "TIMEOUT", "reached its time limit (0:01:00): Slurm stopped it"),
        ("112", JobPhase.FAILED, "PREEMPTED", "was preempted by a job of a higher priority (add --requeue"),
        ("113", JobPhase.FAILED, "NODE_FAIL", "lost its node (gpu3)"),
        ("114", JobPhase.FAILED, "OUT_OF_MEMORY", "went over its memory (--mem)"),
        ("110", JobPhase.CANCELLED, "CANCELLED", "was cancelled outside jupyter_disttrain"),
        ("109", JobPhase.FAILED, "FAILED", "failed in its batch script (exit code 3): python: not found"),
    ],
)
def test_a_stop_slurm_made_is_named_and_every_replica_ends_with_it(
    job_id: str, phase: JobPhase, reason: str, words: str
) -> None:
    status = merge(running(), seen(LATER[job_id], launcher_line="python: not found"))
    assert (status.phase, status.reason) == (phase, reason)
    assert words in (status.message or "")
    assert [(r.phase, r.reason) for r in status.replicas] == [(phase, reason)] * 2
    assert status.finish_time is not None


def test_a_batch_script_that_failed_silently_points_at_the_shared_filesystem() -> None:
    status = merge(running(), seen(LATER["109"]))
    assert status.message == (
        "Slurm job 109 failed in its batch script (exit code 3); it wrote nothing into launcher.log: "
        "do the nodes see the job dir (a filesystem they share with the notebook) and this kernel's "
        "Python at the same path?"
    )


def test_running_and_completing_jobs_keep_the_job_dirs_status() -> None:
    status = running()
    assert merge(status, seen(LATER["106"])) is status
    # Timed out but still completing: the launcher is stopping it, and says so in the job dir.
    assert merge(status, seen(LATER["115"])) is status
    starting = merge(JobStatus("j", JobPhase.PENDING), seen(LATER["106"]))
    assert (starting.phase, starting.reason) == (JobPhase.PENDING, "Starting")
    assert starting.message == "Slurm job 106 runs on gpu1; its launcher is starting"


def test_the_recorded_2205_states_read_the_same() -> None:
    assert merge(running(), seen(REC["1"])).reason == "TIMEOUT"
    assert merge(running(), seen(REC["5"])).reason == "NODE_FAIL"
    assert merge(running(), seen(REC["6"])).reason == "PREEMPTED"
    assert merge(running(), seen(REC["4"])).phase is JobPhase.CANCELLED


def test_a_job_slurm_forgot_is_decided_by_the_job_dir() -> None:
    timeout = merge(
        running(), seen(None, stopped={"signal": "SIGTERM", "state": "COMPLETING", "reason": "TimeLimit"})
    )
    assert (timeout.phase, timeout.reason) == (JobPhase.FAILED, "TIMEOUT")
    stopped = merge(running(), seen(None, stopped={"signal": "SIGTERM", "state": "COMPLETING", "reason": ""}))
    assert stopped.reason == "SlurmStopped" and "no longer knows why" in (stopped.message or "")
    lost = merge(running(), seen(None, launcher_line="Killed"))
    assert (lost.reason, lost.message) == (
        "LauncherLost",
        "Slurm no longer knows Slurm job 9, and its launcher left no result: Killed",
    )
    vanished = merge(JobStatus("j", JobPhase.PENDING), seen(None))
    assert vanished.reason == "Vanished"


def test_job_steps_in_an_allocation() -> None:
    job = LATER["106"]
    alive = Seen(what="allocation 106", mode=STEP, job=job, launcher_alive=True)
    assert merge(running(), alive).phase is JobPhase.RUNNING
    dead = Seen(what="allocation 106", mode=STEP, job=job, launcher_alive=False)
    assert merge(running(), dead).reason == "LauncherLost"
    ended = Seen(what="allocation 111", mode=STEP, job=LATER["111"], launcher_alive=False)
    gone = merge(running(), ended)
    assert gone.reason == "TIMEOUT" and gone.message.startswith(
        "its allocation ended: allocation 111 reached"
    )  # type: ignore[union-attr]
    # While the launcher lives it records the end itself (its steps ended with the allocation).
    assert (
        merge(running(), Seen(what="allocation 111", mode=STEP, job=LATER["111"], launcher_alive=True)).phase
        is JobPhase.RUNNING
    )
