"""The Python API: submit a script as a distributed job and follow it (the REST API is
``server/handlers.py``; both sit on ``manager.JobManager``).

``%%distrun`` and ``jupyter disttrain`` are thin layers over this module, which is itself a
thin layer over ``JobManager`` (the REST API's too)::

    job = jupyter_disttrain.submit(open("train.py").read(), gpus=2)
    job.wait()
    for line in job.logs(tail=20):
        print(line.text)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .backends.base import Backend
from .jobs import values as jobvalues
from .jobs.errors import JobCancelledError, job_error
from .jobs.intake import spec_from_words
from .jobs.logs import FollowPage
from .jobs.manager import JobManager, manager_for
from .model.polling import Backoff
from .model.progress import Progress
from .model.specs import DryRun, JobPhase, JobSpec, JobStatus, LogLine
from .payloads.checkpoints import CheckpointList
from .payloads.jobs import Failure, KeptValue
from .payloads.monitoring import Incident, IncidentSummary, Resources, StackDump
from .payloads.pools import PoolList, ReleaseAnswer
from .payloads.runs import RunSummary
from .runtime import contract
from .storage.logfiles import Budget
from .storage.store import JobRecord, JobStore

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .jobs.values import Values
    from .packaging.pitfalls import Target

# A follower reads on at once while output flows; while the job is quiet it looks again after
# 0.1 s, then less often, at least once a second.
FOLLOW_CADENCE = (0.1, 1.0)


class Job:
    """A handle on one job in the store. Cheap; holds no state but the id and the store."""

    def __init__(self, job_id: str, store: JobStore | None = None) -> None:
        self.store = store or JobStore()
        self.id = job_id
        self.record: JobRecord = self.store.read_record(job_id)

    def __repr__(self) -> str:
        return f"<Job {self.id} ({self.record.backend}) {self.status().phase.value}>"

    @property
    def dir(self) -> Path:
        return self.store.job_dir(self.id)

    @property
    def spec(self) -> JobSpec:
        return self.record.spec

    @property
    def manager(self) -> JobManager:
        return manager_for(self.store)

    @property
    def backend(self) -> Backend:
        return self.manager.backend(self.record.backend)

    def status(self) -> JobStatus:
        return self.backend.describe(self.id)

    def wait(self, timeout: float | None = None, poll: float = 0.2) -> JobStatus:
        """Block until the job ends (or ``timeout`` seconds pass); return its status."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status()
            if status.is_terminal or (deadline is not None and time.monotonic() >= deadline):
                return status
            time.sleep(poll)

    def logs(
        self,
        replica: str | None = None,
        *,
        follow: bool = False,
        tail: int | None = None,
        offset: str | int | None = None,
        budget: Budget | None = None,
    ) -> Iterator[LogLine]:
        """The job's output (see ``Backend.logs``); a ``Budget`` bounds the bytes read."""
        return self.backend.logs(self.id, replica, follow=follow, tail=tail, offset=offset, budget=budget)

    def follow(self, replica: str | None = None, *, tail: int | None = None) -> Iterator[FollowPage]:
        """Pages of the job's output as it is written (``JobLogs.follow``: each with the
        status read before its lines), from the last ``tail`` lines or the start, until the job
        has ended and every line was read. Reads on at once while output flows or the phase
        changes; waits from 0.1 s up to a second while the job is quiet."""
        poll = Backoff(*FOLLOW_CADENCE)
        offset: str | None = None
        last_phase = None
        while True:
            page = self.manager.logs.follow(self.id, offset, replica=replica, tail=tail)
            yield page
            if page.done:
                return
            offset, tail = page.page.offset or offset, None  # after the first page, the token says where
            poll.wait(active=bool(page.page.runs) or page.status.phase != last_phase)
            last_phase = page.status.phase

    def cancel(self) -> JobStatus:
        return self.manager.cancel(self.id)

    def resources(self, since: float | None = None) -> Resources:
        """Each replica's resource samples newer than ``since`` and its liveness."""
        return self.manager.resources(self.id, since)

    def stack(self, replica: str, method: str | None = None) -> StackDump:
        """The Python stacks of every thread of a running replica (py-spy, else faulthandler)."""
        return self.manager.stack(self.id, replica, method)

    def diagnose(self) -> Incident:
        """Which rank is stuck, in which collective, at which cell line (``Incident.verdict``);
        kept in the job dir as an incident of its own."""
        return self.manager.diagnoses.diagnose(self.id)

    def incidents(self, limit: int = 50) -> list[IncidentSummary]:
        """The job's diagnoses, newest first (``diagnose``'s, and the guard's)."""
        from .monitoring.incidents import summaries

        return summaries(self.dir, limit)

    def failure(self, status: JobStatus | None = None) -> Failure | None:
        """Why the job failed (its root cause's traceback, mapped to the notebook's cells); None
        unless it failed. ``status``: the one already read, else it is read now."""
        return self.manager.failure(self.record, status or self.status())

    def progress(self, status: JobStatus | None = None) -> Progress | None:
        """How far the running job is (em's total, else its tqdm bar); None once it has ended."""
        return self.manager.progress(self.record, status or self.status())

    def runs(self, status: JobStatus | None = None) -> list[RunSummary]:
        """The job's runs of experiment tracking (em, MLflow, its own), with their last metrics."""
        return self.manager.job_runs(self.record, status or self.status())

    def checkpoints(self) -> CheckpointList:
        """The job's checkpoints, oldest first, and the disk they use (README "Checkpoints")."""
        return self.manager.checkpoints(self.id)

    def values(self) -> list[KeptValue]:
        """What ``--out``/``--out-all`` kept of the job: names, ranks, kinds, types, sizes, and
        what did not come back and why (docs/notebook.md, "Values back in the kernel")."""
        return jobvalues.kept(self.store, self.record)

    def result(self, timeout: float | None = None, namespace: Mapping[str, Any] | None = None) -> Values:
        """Wait for the job to end; its ``--out`` values by name (``--out-all``'s a list by rank),
        modules and optimizers rebuilt with the classes of ``namespace`` (default: ``__main__``'s,
        a kernel's user namespace); ``.notes`` says what did not come back and why.

        Raises the job's error when it did not succeed: ``JobCancelledError``, or
        ``JobFailedError`` (as the root-cause rank's own exception type too, when this process
        can import it: ``jobs/errors.py``); ``TimeoutError`` when ``timeout`` passed first."""
        from .model.failure import failure_line

        status = self.wait(timeout)
        if not status.is_terminal:
            raise TimeoutError(f"job {self.id} is still {status.phase.value} after {timeout} s")
        where = namespace if namespace is not None else vars(sys.modules["__main__"])
        if status.phase is JobPhase.CANCELLED:
            raise JobCancelledError(f"job {self.id} cancelled")
        if status.phase is JobPhase.FAILED:
            raise job_error(failure_line(status), self.failure(status), where)
        if not (self.spec.out or self.spec.out_all):
            return jobvalues.Values()
        return jobvalues.load(self.store, self.record, status, where)

    def delete(self, purge: bool = False) -> None:
        self.manager.delete(self.id, purge=purge)

    @property
    def script(self) -> str:
        return self.store.read_script(self.id)


make_spec = spec_from_words  # the Python API's name for it


def job_target(spec: JobSpec) -> Target:
    """What the checks before launch need to know about where ``spec`` runs (GPUs, world size)."""
    from .packaging.pitfalls import Target

    flags = f"--gpus {spec.nproc_per_node} --nodes {spec.nodes}"
    no_gpu = None
    if spec.accelerator == "cpu":
        no_gpu = "--accelerator cpu"
    elif spec.backend == "local":
        from .backends.local.devices import job_gpus

        no_gpu = None if job_gpus(spec.accelerator) else "no GPU is visible on this machine"
    return Target(spec.world_size, flags, no_gpu, spec.nproc_per_node, spec.nodes)


def kernel_dirs() -> tuple[str, ...]:
    """Where ``em`` writes when it runs outside a job, as in this kernel (``./.disttrain``'s
    checkpoints, runs and TensorBoard dirs): a value holding such a path is the kernel's, not a
    job's (what packaging warns about, or rebuilds in the job)."""
    root = Path.cwd() / contract.LOCAL_DIR
    return tuple(
        str(root / d) for d in (contract.CHECKPOINTS_DIR, contract.RUNS_DIR, contract.TENSORBOARD_DIR)
    )


def submit(
    script: str,
    spec: JobSpec | None = None,
    *,
    store: JobStore | None = None,
    files: dict[str, bytes] | None = None,
    **spec_fields: Any,
) -> Job:
    """Run ``script`` (Python source) as a distributed job; returns at once with a ``Job``.

    Give a ``JobSpec`` or the fields of one (``gpus=2, nodes=1, name=..., backend=...``).
    """
    store = store or JobStore()
    job_id = manager_for(store).submit(spec or make_spec(**spec_fields), script, files)
    return Job(job_id, store)


def dryrun(
    script: str,
    spec: JobSpec | None = None,
    *,
    store: JobStore | None = None,
    files: dict[str, bytes] | None = None,
    **spec_fields: Any,
) -> DryRun:
    """The exact request ``submit`` would make, with nothing created or launched."""
    return manager_for(store or JobStore()).dryrun(spec or make_spec(**spec_fields), script, files)


def get_job(job_id: str, store: JobStore | None = None) -> Job:
    return Job(job_id, store)


def list_jobs(store: JobStore | None = None) -> list[JobStatus]:
    """Status of every job in the store, newest first, whatever its backend.

    A backend that cannot be loaded here (say, the kubernetes client is missing) does not
    hide its jobs: their last stored status is shown.
    """
    return [listed.status for listed in manager_for(store or JobStore()).list_jobs()]


def pools(store: JobStore | None = None) -> PoolList:
    """The capacity kept warm between jobs (Slurm's warm steps), of every backend that keeps it."""
    return manager_for(store or JobStore()).pools.list_pools()


def release_pool(pool_id: str, force: bool = False, store: JobStore | None = None) -> ReleaseAnswer:
    """Give a warm pool back now; one running a job only with ``force`` (the job fails)."""
    return manager_for(store or JobStore()).pools.release(pool_id, force)


def cancel_orphans(grace: float = 10.0) -> dict[str, int]:
    """Stop the processes of local jobs whose job dir was removed while they ran (nothing else
    can find them: no record names them any more). Returns how many were stopped, by job dir."""
    from .storage import procs

    found = procs.orphans()
    for processes in found.values():
        procs.stop_processes(processes, grace)
    return {job_dir: len(processes) for job_dir, processes in found.items()}
