"""``JobManager``: the one job layer every front end calls.

The Python API (and through it ``%%distrun`` and ``jupyter disttrain``) and the REST handlers
all list, describe, read, follow, submit, cancel and delete jobs here, so ``%distrun list``,
``jupyter disttrain list`` and ``GET jobs`` do the same work: one backend per name (made once,
kept), each backend asked once for all its jobs, a backend that cannot load or answer falling
back to the jobs' stored status, and ended jobs' statuses kept while their files stay the same.
Every method is blocking (files, cluster calls); the server runs them in worker threads.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from ..backends import default_backend_name, get_backend
from ..model.errors import DistTrainError, InvalidSpecError
from ..model.progress import Progress
from ..model.specs import DryRun, JobPhase, JobSpec, JobStatus, validate_job_id
from ..packaging.origins import ORIGINS_FILE
from ..packaging.values import ARRAY_FILE, TENSOR_FILE
from ..payloads import to_json
from ..payloads.checkpoints import CheckpointList
from ..payloads.jobs import Failure, JobDetail, JobSummary, ResumeAnswer, RoleSummary, SubmitAnswer
from ..payloads.monitoring import Resources, StackDump
from ..payloads.runs import RunDetail, RunQuery, RunSummary
from ..storage.safefiles import is_real_file, open_regular
from ..tracking import hparams
from ..tracking.runs import RunsReader
from ..tracking.sources import JobRuns, RunSources
from . import values as jobvalues
from .checkpoints import Chosen, JobCheckpoints
from .diagnosis import JobDiagnoses, detail_parts, guard_of
from .intake import validate_replica
from .logs import JobLogs
from .pools import JobPools

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..storage.store import JobRecord, JobStore

log = logging.getLogger(__name__)
SIDE_FILES = (TENSOR_FILE, ARRAY_FILE, ORIGINS_FILE)  # what packaging ships beside the script


@dataclass(frozen=True)
class Listed:
    """One job of a listing: its record, its status, and its summary as the API sends it (made
    once per status read: an ended job's is reused while its files stay the same)."""

    fingerprint: tuple[int, ...]  # of the files the status was read from
    record: JobRecord
    status: JobStatus
    summary: dict[str, Any]
    progress: Progress | None = None  # while it runs (the summary's, typed)


class JobManager:
    """Jobs of every backend in one store."""

    def __init__(self, store: JobStore, default_backend: str | None = None) -> None:
        self.store = store
        self.default_backend = default_backend or default_backend_name()
        self._backends: dict[str, Backend] = {}
        self._lock = threading.Lock()
        self._ended: dict[str, Listed] = {}  # by job id
        self.runs = RunsReader()  # em's runs: remembers how far it read each metrics file
        self.run_sources = RunSources(self.runs)
        self.job_checkpoints = JobCheckpoints(store, self.runs, self.stored_status)
        self.diagnoses = JobDiagnoses(store, self.backend)
        self.logs = JobLogs(self.backend_of)
        self.pools = JobPools(self.backend)

    def backend(self, name: str) -> Backend:
        """The backend called ``name`` over this store, made once and kept.

        A backend that cannot be made (not installed, no cluster config) raises each time,
        so installing or configuring it later works without starting anew.
        """
        with self._lock:
            backend = self._backends.get(name)
            if backend is None:
                backend = self._backends[name] = get_backend(name, self.store)
            return backend

    def backend_of(self, job_id: str) -> Backend:
        return self.backend(self.store.read_record(job_id).backend)

    # -- reading -------------------------------------------------------------------------------
    def list_jobs(self) -> list[Listed]:
        """Every job not deleted with its status, newest first.

        An ended job's entry is kept while its files stay the same, so a listing reads only
        what changed and rebuilds nothing else (the lab extension polls it every few seconds).
        """
        fingerprints = self.store.fingerprints()  # taken before reading: a later write misses the cache
        out: list[Listed] = []
        changed: list[JobRecord] = []
        for job_id, fingerprint in fingerprints.items():
            hit = self._ended.get(job_id)
            if hit is not None and hit.fingerprint == fingerprint:
                out.append(hit)
                continue
            try:
                changed.append(self.store.read_record(job_id))
            except (OSError, ValueError, KeyError, DistTrainError):
                continue  # being written or removed right now: the next listing has it
        for record, status in self._statuses(changed):
            summary = self._summary(record, status)
            listed = Listed(fingerprints[record.id], record, status, to_json(summary), summary.progress)
            out.append(listed)
            if status.is_terminal:
                self._ended[record.id] = listed
        for gone in [j for j in list(self._ended) if j not in fingerprints]:  # deleted or purged
            self._ended.pop(gone, None)
        out.sort(key=lambda listed: listed.record.created, reverse=True)
        return out

    def _statuses(self, records: list[JobRecord]) -> Iterator[tuple[JobRecord, JobStatus]]:
        by_backend: dict[str, list[JobRecord]] = defaultdict(list)
        for record in records:
            by_backend[record.backend].append(record)
        for name, group in by_backend.items():
            statuses: dict[str, JobStatus] = {}
            try:
                statuses = {s.job_id: s for s in self.backend(name).list(group)}
            except Exception as exc:  # ImportError, cluster down...: fall back, keep listing
                log.warning("backend %r could not list its jobs, showing stored status: %s", name, exc)
            for record in group:
                yield record, statuses.get(record.id) or self.stored_status(record)

    def _quiet(self, record: JobRecord, status: JobStatus) -> list[str]:
        """The replicas of a running job flagged quiet; none when its backend cannot tell."""
        if status.phase is not JobPhase.RUNNING:
            return []  # most of a long listing: not even its backend is looked up
        try:
            return self.backend(record.backend).quiet(record, status)
        except Exception as exc:  # a flag, not the listing: never fail it
            log.debug("could not tell whether job %s has quiet replicas: %s", record.id, exc)
            return []

    def progress(self, record: JobRecord, status: JobStatus) -> Progress | None:
        """Where a running job stands: em's run with a total, else its tqdm bar (None once ended)."""
        if status.phase is not JobPhase.RUNNING:
            return None  # most of a long listing: nothing is read
        from .progress import progress_of

        try:
            return progress_of(self.backend(record.backend), record, status, self.job_runs(record, status))
        except Exception as exc:  # a progress bar, not the listing: never fail it
            log.debug("could not tell how far job %s is: %s", record.id, exc)
            return None

    def _summary(self, record: JobRecord, status: JobStatus, deleted: bool = False) -> JobSummary:
        """The list's view of a job: its status, quiet replicas, progress, TensorBoard data, guard."""
        quiet, progress = self._quiet(record, status), self.progress(record, status)
        tensorboard, guarded = _wrote_tensorboard(self.store, record.id), guard_of(self.store, record, status)
        return JobSummary.of(record, status, deleted, quiet, progress, tensorboard, guarded)

    def status(self, job_id: str) -> JobStatus:
        return self.backend_of(job_id).describe(job_id)

    def detail(self, job_id: str) -> JobDetail:
        """Spec, launch request and status of one job; its stored status, and why, when its
        backend cannot load or answer."""
        record = self.store.read_record(job_id)
        deleted = self.store.is_deleted(job_id)
        status, backend_error = self._describe(record)
        summary = self._summary(record, status, deleted)
        roles = RoleSummary.of(record, status)
        failure = self.failure(record, status) if backend_error is None else None
        return JobDetail(
            job_id,
            summary,
            record.spec,
            record.request,
            status,
            deleted,
            backend_error,
            roles,
            failure,
            self.job_checkpoints.usage(job_id),
            jobvalues.kept(self.store, record),
            **detail_parts(self.store, record, status),  # incidents, resource-hours
        )

    def failure(self, record: JobRecord, status: JobStatus) -> Failure | None:
        """Why the job failed, as the notebook's own error (None unless it failed)."""
        from .failure import failure_of

        return failure_of(self.store, self.backend(record.backend), record, status)

    def _describe(self, record: JobRecord) -> tuple[JobStatus, str | None]:
        """The job's status from its backend; its stored status, and why, when the backend
        cannot load or answer."""
        try:
            return self.backend(record.backend).describe(record.id), None
        except (ImportError, DistTrainError, OSError) as exc:  # still show what is stored
            return self.stored_status(record), str(exc)

    def stored_status(self, record: JobRecord) -> JobStatus:
        try:
            status = self.store.read_status(record.id)
        except (OSError, ValueError, KeyError, DistTrainError):
            status = None
        return status or JobStatus(job_id=record.id, created=record.created)

    # -- resources and stacks --------------------------------------------------------------------
    def resources(self, job_id: str, since: float | None = None) -> Resources:
        """Each replica's resource samples newer than ``since`` (seconds since the epoch; all kept
        ones when None, thinned to ``monitoring.resources.MAX_POINTS``) and its liveness."""
        validate_job_id(job_id)
        if since is not None and not since >= 0:  # also refuses NaN
            raise InvalidSpecError("since must be seconds since the epoch: an earlier answer's 'now'")
        return self.backend_of(job_id).resources(job_id, since)

    def stack(self, job_id: str, replica: str, method: str | None = None) -> StackDump:
        """The Python stacks of every thread of ``replica`` (py-spy, else faulthandler; ``method``
        forces one)."""
        from ..monitoring.stacks import validate_method

        validate_job_id(job_id)
        name = validate_replica(replica)
        if name is None:
            raise InvalidSpecError("name the replica whose stacks to dump, e.g. rank-1")
        from .failure import mapped_stack

        record = self.store.read_record(job_id)
        dump = self.backend(record.backend).stack(job_id, name, validate_method(method))
        return mapped_stack(self.store, record, dump)

    # -- runs of experiment tracking (em, MLflow, the job's own) ---------------------------------
    def list_runs(self, job: str | None = None) -> list[RunSummary]:
        """Every run of every listed job (newest job first), or of the job ``job``."""
        if job is not None:
            self.store.existing_dir(job)  # an unknown job is an error, not an empty list
        out: list[RunSummary] = []
        for listed in self.list_jobs():
            if job is not None and listed.record.id != job:
                continue
            out += self.run_sources.summaries(self._runs_of(listed.record, listed.status))
        return out

    def job_runs(self, record: JobRecord, status: JobStatus) -> list[RunSummary]:
        """The runs of one job (its progress and the widget's sparkline read them)."""
        return self.run_sources.summaries(self._runs_of(record, status))

    def run_detail(self, job_id: str, run: str, query: RunQuery | None = None) -> RunDetail:
        """A run's record, artifacts, progress and a page of its points (``query``: from byte
        ``since``, at most ``limit``, of ``rank``)."""
        self.store.existing_dir(job_id)
        record = self.store.read_record(job_id)
        runs_of = self._runs_of(record, self._describe(record)[0])
        return self.run_sources.detail(runs_of, run, query or RunQuery())

    def _runs_of(self, record: JobRecord, status: JobStatus) -> JobRuns:
        job_dir = self.store.job_dir(record.id)
        # The all-jobs TensorBoard reads the store's root: a job of another root is not in it.
        in_root = job_dir.parent == self.store.root
        return JobRuns(
            job_dir, record.id, record.spec.name, status, record.spec.hparams, record.id if in_root else None
        )

    def open_artifact(self, job_id: str, run: str, path: str) -> IO[bytes]:
        """An artifact file of a run, opened without following a link out of the run's directory
        (opened here rather than handed out as a path: a link swapped in after a check of the
        path would be followed by whoever opened it next)."""
        return self.runs.open_artifact(self.store.existing_dir(job_id), run, path)

    def checkpoints(self, job_id: str) -> CheckpointList:
        """The job's checkpoints (README "Checkpoints"), oldest first, and the disk they use."""
        return self.job_checkpoints.listing(job_id)

    # -- changing ------------------------------------------------------------------------------
    def submit(
        self,
        spec: JobSpec,
        script: str,
        files: dict[str, bytes] | None = None,
        *,
        chosen: Chosen | None = None,
    ) -> str:
        """Launch ``spec``; ``chosen``: the checkpoint it starts from, chosen already (else its
        ``resume`` is chosen here)."""
        spec = self._prepared(spec, script, chosen)
        job_id = self.backend(spec.backend).submit(spec, script, files)
        self.job_checkpoints.pin(spec, job_id)  # once accepted: a refused submit pins nothing
        return job_id

    def dryrun(self, spec: JobSpec, script: str, files: dict[str, bytes] | None = None) -> DryRun:
        return self.backend(spec.backend).dryrun(self._prepared(spec, script), script=script, files=files)

    def _prepared(self, spec: JobSpec, script: str, chosen: Chosen | None = None) -> JobSpec:
        """The spec a submit or a dry run carries out: ``--out`` checked against the script, the
        script arguments' hyper-parameters merged, ``--resume`` resolved (unless ``chosen``)."""
        jobvalues.check(spec, script)
        spec = _with_arg_hparams(spec)
        if chosen is None:
            return self.job_checkpoints.resolve(spec)
        return dataclasses.replace(spec, resume=chosen.reference, resumed_from=chosen.resumed_from)

    def resubmit(self, job_id: str, chosen: Chosen | None = None) -> SubmitAnswer:
        """Submit job ``job_id``'s own spec, script and packaged values again: from the start,
        or from the checkpoint ``chosen``."""
        record = self.store.read_record(job_id)
        spec = dataclasses.replace(record.spec, resume=None, resumed_from=None)
        new_id = self.submit(
            spec, self.store.read_script(job_id), _side_files(self.store, job_id), chosen=chosen
        )
        try:  # launched: whatever fails now is no fault of the request
            new = self.store.read_record(new_id)
            return SubmitAnswer(new_id, JobSummary.of(new, self.stored_status(new)))
        except (OSError, DistTrainError) as exc:
            raise DistTrainError(
                f"job {new_id} was launched, but its record could not be read: {exc}"
            ) from exc

    def resume(self, job_id: str, which: str) -> ResumeAnswer:
        """Submit job ``job_id`` again from its checkpoint ``which``, chosen once before the launch:
        the answer names what the new job got, with nothing listed again after it (a checkpoint
        deleted meanwhile would turn a launched job into a "no checkpoint" error)."""
        record = self.store.read_record(job_id)
        chosen = self.job_checkpoints.choose(job_id, which, record.spec.world_size)
        new = self.resubmit(job_id, chosen)
        return ResumeAnswer(new.id, new.job, chosen.listed)

    def cancel(self, job_id: str) -> JobStatus:
        return self.backend_of(job_id).cancel(job_id)

    def delete(self, job_id: str, purge: bool = False) -> None:
        """Remove the job from its backend and the list; files stay unless ``purge``."""
        record = self.store.read_record(job_id)
        if self.store.is_deleted(job_id):
            if purge:
                self.store.purge(job_id)
        else:
            self.backend(record.backend).delete(job_id, purge=purge)
        if purge:  # gone for good: the checkpoint it resumed from is no longer held for it
            self.job_checkpoints.unpin(record)


def _wrote_tensorboard(store: JobStore, job_id: str) -> bool:
    """Whether the job wrote TensorBoard data (an ended job's answer is kept with its entry)."""
    from ..monitoring.resources import wrote_tensorboard

    try:
        return wrote_tensorboard(store.job_dir(job_id))
    except (OSError, DistTrainError):  # a flag, not the listing: never fail it
        return False


def _side_files(store: JobStore, job_id: str) -> dict[str, bytes]:
    """The values and origins the job was packaged with (read as they are: links refused)."""
    out = {}
    job_dir = store.job_dir(job_id)
    for name in SIDE_FILES:
        if is_real_file(job_dir / name):
            with open_regular(job_dir / name) as f:
                out[name] = f.read()
    return out


def _with_arg_hparams(spec: JobSpec) -> JobSpec:
    """``spec`` with the ``--name value`` arguments after ``--`` among its hparams (they win over
    the notebook's dict: they are what the script reads), credential-like values masked
    (whichever front end gave them)."""
    values = hparams.merged(spec.hparams, hparams.from_args(spec.args))
    return spec if values == spec.hparams else dataclasses.replace(spec, hparams=values)


_managers: dict[JobStore, JobManager] = {}
_managers_lock = threading.Lock()


def manager_for(store: JobStore) -> JobManager:
    """The manager of ``store`` in this process (equal stores share one, and their backends)."""
    with _managers_lock:
        manager = _managers.get(store)
        if manager is None:
            manager = _managers[store] = JobManager(store)
        return manager
