"""Slurm's job states and pending reasons in the job's words: a phase, a reason, a message.

Pure: ``verdict`` reads one ``SlurmJob``. Slurm's own names stay the reasons (``TIMEOUT``,
``PREEMPTED``, ``NODE_FAIL``, ``OUT_OF_MEMORY``, ``CANCELLED``; while pending ``Resources``,
``Priority``...), as a Kubernetes job's are the cluster's (``OOMKilled``, ``Unschedulable``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...model.specs import JobPhase
from .parse import BASE_STATES, SlurmJob

RUNNING_STATES = frozenset({"RUNNING", "SUSPENDED"})
ENDED_STATES = BASE_STATES - RUNNING_STATES - {"PENDING"}
REQUEUE_FLAGS = frozenset({"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
# Flags of a job still holding its nodes: its phase is what the job dir says.
BUSY_FLAGS = frozenset({"COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT", "RESIZING", "STOPPED"})

# What a pending reason means to the person waiting (job_reason_codes.shtml); others are shown as is.
PENDING = {
    "Resources": "waiting for nodes, CPUs, GPUs or memory to free up",
    "Priority": "jobs of a higher priority are ahead of it",
    "None": "waiting for Slurm's scheduler",
    "BeginTime": "held until its begin time",
    "Dependency": "waiting for the jobs it depends on",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
    "PartitionTimeLimit": "--time is over the partition's limit: it will never start",
    "PartitionNodeLimit": "--nodes is over the partition's limit: it will never start",
    "QOSMaxJobsPerUserLimit": "the QOS lets no more of your jobs run at once",
    "AssocGrpCpuLimit": "your account's CPU limit is reached",
    "AssocGrpGRES": "your account's GPU limit is reached",
    "JobHeldUser": "held by its owner (scontrol release to start it)",
    "JobHeldAdmin": "held by an administrator",
    "Reservation": "waiting for its reservation to start",
}

# What each end says after the job's name ("Slurm job 123 ...").
ENDS = {
    "TIMEOUT": (JobPhase.FAILED, "reached its time limit{limit}: Slurm stopped it"),
    "PREEMPTED": (
        JobPhase.FAILED,
        "was preempted by a job of a higher priority (add --requeue to run it again)",
    ),
    "NODE_FAIL": (JobPhase.FAILED, "lost its node ({nodes}): Slurm found it down and stopped the job"),
    "OUT_OF_MEMORY": (JobPhase.FAILED, "went over its memory (--mem): Slurm killed a process"),
    "BOOT_FAIL": (JobPhase.FAILED, "could not boot its node ({nodes})"),
    "DEADLINE": (JobPhase.FAILED, "could not start before its deadline"),
    "CANCELLED": (JobPhase.CANCELLED, "was cancelled outside jupyter_disttrain{by}"),
    "FAILED": (JobPhase.FAILED, "failed in its batch script{code}"),
    "COMPLETED": (JobPhase.FAILED, "ended without the job's result"),
}


@dataclass(frozen=True)
class Verdict:
    phase: JobPhase
    reason: str | None
    message: str | None


def duration(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    text = f"{rest // 3600}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def verdict(job: SlurmJob, what: str) -> Verdict:
    """``job``'s phase as the job's own, ``what`` naming it in messages ("Slurm job 123")."""
    if job.state == "PENDING" or job.shown_state in REQUEUE_FLAGS:
        return pending(job, what)
    if job.state in RUNNING_STATES or not job.state:
        return Verdict(JobPhase.RUNNING, None, None)
    phase, template = ENDS.get(job.state, (JobPhase.FAILED, job.state.lower().replace("_", " ")))
    message = template.format(
        limit=f" ({duration(job.time_limit)})" if job.time_limit else "",
        nodes=job.nodes or "a node",
        by=f" (by uid {job.cancelled_by})" if job.cancelled_by else " (scancel, or an administrator)",
        code=f" (exit code {job.exit_code})"
        if job.exit_code
        else (f" (signal {job.signal})" if job.signal else ""),
    )
    return Verdict(phase, job.state, f"{what} {message}")


def pending(job: SlurmJob, what: str) -> Verdict:
    reason = job.reason or "None"
    why = PENDING.get(reason, f"Slurm says: {reason}")
    if job.description and job.description != reason:
        why += f" ({job.description})"
    where = f", partition {job.partition}" if job.partition else ""
    if job.restarts or set(job.flags) & REQUEUE_FLAGS:
        return Verdict(
            JobPhase.PENDING,
            "Requeued",
            f"{what} was requeued (restart {job.restarts}) and waits to run again{where}: {why}",
        )
    return Verdict(JobPhase.PENDING, reason, f"{what} is pending{where}: {why}")
