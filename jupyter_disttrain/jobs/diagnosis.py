"""A running job's diagnosis ("which rank is stuck, in which collective, at which cell line"), its
incidents, its guard's word, and what it held and used, for every front end.

Reading the ranks is the backend's (``read_ranks``: this machine's processes for a local job, a
Slurm node's through srun, a pod's through ``pods/exec``); analysing what was read and keeping it
is ``monitoring.incidents``'; this module is the job layer's part: the checks, and the fields the
details and the listing show.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..model.errors import BackendError, DistTrainError, InvalidSpecError, JobEndedError
from ..model.specs import JobPhase, JobStatus, validate_job_id
from ..monitoring import guard, incidents
from ..payloads.monitoring import GuardState, Incident, IncidentSummary, ResourceHours
from ..payloads.runs import RunSummary

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..storage.store import JobRecord, JobStore

RankReader = Callable[["JobRecord", JobStatus], incidents.Answers]


def rank_reader(backend: Backend) -> RankReader:
    """The backend's way to read its ranks' debug sockets (``read_ranks``)."""
    reader: RankReader | None = getattr(backend, "read_ranks", None)
    if reader is None:
        raise BackendError(f"the {backend.name} backend cannot read its ranks' collectives and stacks")
    return reader


class JobDiagnoses:
    """The diagnoses of the jobs of every backend (``backend``: one by its name); ``JobManager``
    makes one (``manager.diagnoses``)."""

    def __init__(self, store: JobStore, backend: Callable[[str], Backend]) -> None:
        self.store = store
        self._backend = backend

    def diagnose(self, job_id: str, trigger: str = "manual") -> Incident:
        """Read every rank (each read bounded in time), analyse, say it in one sentence, and keep
        it in the job dir as an incident of its own."""
        validate_job_id(job_id)
        record = self.store.read_record(job_id)
        backend = self._backend(record.backend)
        status = backend.describe(job_id)
        if status.is_terminal:
            raise JobEndedError(job_id, status.phase.value, "a diagnosis")
        if status.phase is not JobPhase.RUNNING:
            raise InvalidSpecError(f"job {job_id} is {status.phase.value}: diagnose it once its ranks run")
        started = time.monotonic()
        answers = rank_reader(backend)(record, status)
        names = [r.name for r in status.replicas]
        if set(answers) - set(names):  # its replicas are not its ranks (pods): the ranks read are
            names = sorted(answers, key=lambda n: (not n.startswith("rank-"), len(n), n))
        job_dir = self.store.job_dir(job_id)
        return incidents.make(job_dir, job_id, record.spec.entrypoint, names, answers, trigger, started)

    def incident(self, job_id: str, name: str) -> Incident:
        """One of the job's incidents, by the name its details list."""
        found = incidents.read(self.store.existing_dir(job_id), name)
        if found is None:
            raise InvalidSpecError(f"job {job_id} has no incident {name!r}; its details list them")
        return found


def detail_parts(store: JobStore, record: JobRecord, status: JobStatus) -> dict[str, Any]:
    """The details' incidents (newest first) and resource-hours."""
    from ..monitoring.usage import job_hours

    job_dir = store.job_dir(record.id)
    summaries: list[IncidentSummary] = incidents.summaries(job_dir)
    hours: ResourceHours | None = job_hours(job_dir, record, status)
    return {"incidents": summaries, "hours": hours}


_ENDED_HOURS: dict[tuple[str, str], ResourceHours | None] = {}  # (job id, finish time): they no longer change
_RESUMES = 20  # jobs a run's resume chain is followed through, at most


def hours_of(store: JobStore, job_id: str) -> ResourceHours | None:
    """A job's resource-hours (an ended job's read once)."""
    from ..monitoring.usage import job_hours

    record = store.read_record(job_id)
    status = store.read_status(job_id) or JobStatus(job_id=job_id)
    key = (job_id, status.finish_time or "")
    if status.finish_time and key in _ENDED_HOURS:
        return _ENDED_HOURS[key]
    hours = job_hours(store.job_dir(job_id), record, status)
    if status.finish_time:
        _ENDED_HOURS[key] = hours
    return hours


def runs_with_hours(store: JobStore, runs: list[RunSummary]) -> list[RunSummary]:
    """Each run with what its job held and used, summed over the jobs it was resumed from
    (restarts are in each job's own)."""
    from ..monitoring.usage import summed

    by_job: dict[str, ResourceHours | None] = {}
    for run in runs:
        if run.job_id not in by_job:
            chain, job_id = [], run.job_id
            for _ in range(_RESUMES):
                try:
                    chain.append(hours_of(store, job_id))
                    resumed = store.read_record(job_id).spec.resumed_from
                except (OSError, ValueError, KeyError, DistTrainError):
                    break
                if resumed is None:
                    break
                job_id = resumed.job
            by_job[run.job_id] = summed([h for h in chain if h is not None])
        run.hours = by_job[run.job_id]
    return runs


def check_settings(guard_text: str, prices: dict[str, Any]) -> dict[str, str]:
    """The environment a server gives the kernels it starts (and itself) for its settings of the
    guard's defaults (``DISTTRAIN_GUARD``'s form) and the price table; raises ``InvalidSpecError``."""
    import json

    from ..monitoring.usage import PRICES_ENV

    env = {guard.GLOBAL_ENV: guard_text} if guard_text else {}
    guard.from_env(env)
    if prices:
        bad = [k for k, v in prices.items() if k in ("gpu", "core") and not isinstance(v, (int, float))]
        if bad or not isinstance(prices.get("backends", {}), dict):
            raise InvalidSpecError(
                f"prices: {(bad or ['backends'])[0]} must be a number per hour (backends: a dict)"
            )
        env[PRICES_ENV] = json.dumps(prices)
    return env


def guard_of(store: JobStore, record: JobRecord, status: JobStatus) -> GuardState | None:
    """What the job's guard says while it runs (stalled or idle), else None."""
    if status.phase is not JobPhase.RUNNING:
        return None
    return guard.read_state(store.job_dir(record.id))
