"""``JobManager``: the one job layer every front end calls.

The Python API (and through it ``%%distrun`` and ``jupyter disttrain``) and the REST handlers
all list, describe, read, follow, submit, cancel and delete jobs here, so ``%distrun list``,
``jupyter disttrain list`` and ``GET jobs`` do the same work: one backend per name (made once,
kept), each backend asked once for all its jobs, a backend that cannot load or answer falling
back to the jobs' stored status, and ended jobs' statuses kept while their files stay the same.
Every method is blocking (files, cluster calls); the server runs them in worker threads.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from . import hparams, mlflowdb
from .backends import default_backend_name, get_backend
from .errors import DistTrainError, InvalidSpecError
from .flags import JobWords, RunWords, given
from .intake import MAX_LOG_LIMIT, SPEC_FIELDS, validate_replica
from .logfiles import Budget, take_lines
from .payloads import (
    JOB_RUN,
    JobDetail,
    JobSummary,
    LogPage,
    LogRunsPage,
    Resources,
    RoleSummary,
    RunDetail,
    RunProgress,
    RunSummary,
    StackDump,
    to_json,
)
from .runs import RunsReader, check_limit, check_since, job_record, total_steps
from .specs import DryRun, JobPhase, JobSpec, JobStatus, Volume, validate_job_id

if TYPE_CHECKING:
    from .backends.base import Backend
    from .store import JobRecord, JobStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Listed:
    """One job of a listing: its record, its status, and its summary as the API sends it (made
    once per status read: an ended job's is reused while its files stay the same)."""

    fingerprint: tuple[int, ...]  # of the files the status was read from
    record: JobRecord
    status: JobStatus
    summary: dict[str, Any]


class JobManager:
    """Jobs of every backend in one store."""

    def __init__(self, store: JobStore, default_backend: str | None = None) -> None:
        self.store = store
        self.default_backend = default_backend or default_backend_name()
        self._backends: dict[str, Backend] = {}
        self._lock = threading.Lock()
        self._ended: dict[str, Listed] = {}  # by job id
        self.runs = RunsReader()

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
            summary = JobSummary.of(record, status, quiet=self._quiet(record, status))
            listed = Listed(fingerprints[record.id], record, status, to_json(summary))
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

    def status(self, job_id: str) -> JobStatus:
        return self.backend_of(job_id).describe(job_id)

    def detail(self, job_id: str) -> JobDetail:
        """Spec, launch request and status of one job; its stored status, and why, when its
        backend cannot load or answer."""
        record = self.store.read_record(job_id)
        deleted = self.store.is_deleted(job_id)
        backend_error = None
        try:
            status = self.backend(record.backend).describe(job_id)
        except (ImportError, DistTrainError, OSError) as exc:  # still show what is stored
            backend_error = str(exc)
            status = self.stored_status(record)
        summary = JobSummary.of(record, status, deleted, self._quiet(record, status))
        roles = RoleSummary.of(record, status)
        return JobDetail(job_id, summary, record.spec, record.request, status, deleted, backend_error, roles)

    def phase(self, job_id: str) -> str:
        record = self.store.read_record(job_id)
        try:
            return self.backend(record.backend).describe(job_id).phase.value
        except (ImportError, DistTrainError, OSError):
            return self.stored_status(record).phase.value

    def stored_status(self, record: JobRecord) -> JobStatus:
        try:
            status = self.store.read_status(record.id)
        except (OSError, ValueError, KeyError, DistTrainError):
            status = None
        return status or JobStatus(job_id=record.id, created=record.created)

    # -- logs ----------------------------------------------------------------------------------
    def log_page(
        self,
        job_id: str,
        replica: str | None = None,
        offset: str | None = None,
        tail: int | None = None,
        limit: int = 1000,
    ) -> LogPage:
        """Up to ``limit`` lines from ``offset`` (or the last ``tail`` lines), never a whole file
        and never more than ``ANSWER_BYTES`` of it; ``done`` once the job has ended and every
        line was returned."""
        backend, replica, ended = self._log_reader(job_id, replica, tail, limit)
        budget = Budget()
        lines = take_lines(
            backend.logs(job_id, replica, follow=False, tail=tail, offset=offset or None, budget=budget),
            limit,
        )
        more = len(lines) == limit or budget.hit
        return LogPage(lines, lines[-1].offset if lines else (offset or ""), ended and not more, more)

    def log_runs(
        self,
        job_id: str,
        replica: str | None = None,
        offset: str | None = None,
        tail: int | None = None,
        limit: int = 5000,
    ) -> LogRunsPage:
        """``log_page`` in runs of one replica, for the log stream."""
        backend, replica, ended = self._log_reader(job_id, replica, tail, limit)
        budget = Budget()
        runs = backend.log_runs(
            job_id, replica, tail=tail, offset=offset or None, max_lines=limit, final=ended, budget=budget
        )
        count = sum(len(run.lines) for run in runs)
        more = count >= limit or budget.hit
        return LogRunsPage(runs, runs[-1].offset if runs else (offset or ""), ended and not more, count, more)

    def _log_reader(
        self, job_id: str, replica: str | None, tail: int | None, limit: int
    ) -> tuple[Backend, str | None, bool]:
        """Check a log read's arguments; the job's backend, the replica, and whether the job
        has ended, read *before* the lines so that output written before the end is never missed."""
        validate_job_id(job_id)
        replica = validate_replica(replica)
        if tail is not None and tail < 1:
            raise InvalidSpecError("tail must be 1 or more; to get only new lines, pass the last offset")
        if not 1 <= limit <= MAX_LOG_LIMIT:
            raise InvalidSpecError(f"limit must be between 1 and {MAX_LOG_LIMIT}")
        backend = self.backend_of(job_id)
        return backend, replica, backend.describe(job_id).is_terminal

    # -- resources and stacks --------------------------------------------------------------------
    def resources(self, job_id: str, since: float | None = None) -> Resources:
        """Each replica's resource samples newer than ``since`` (seconds since the epoch; all kept
        ones when None, thinned to ``resources.MAX_POINTS``) and its liveness."""
        validate_job_id(job_id)
        if since is not None and not since >= 0:  # also refuses NaN
            raise InvalidSpecError("since must be seconds since the epoch: an earlier answer's 'now'")
        return self.backend_of(job_id).resources(job_id, since)

    def stack(self, job_id: str, replica: str, method: str | None = None) -> StackDump:
        """The Python stacks of every thread of ``replica`` (py-spy, else faulthandler; ``method``
        forces one)."""
        from .stacks import validate_method

        validate_job_id(job_id)
        name = validate_replica(replica)
        if name is None:
            raise InvalidSpecError("name the replica whose stacks to dump, e.g. rank-1")
        return self.backend_of(job_id).stack(job_id, name, validate_method(method))

    # -- runs of experiment tracking (em) ------------------------------------------------------
    def list_runs(self, job: str | None = None) -> list[RunSummary]:
        """Every run of every listed job (newest job first), or of the job ``job``."""
        if job is not None:
            self.store.existing_dir(job)  # an unknown job is an error, not an empty list
        out: list[RunSummary] = []
        for listed in self.list_jobs():
            if job is not None and listed.record.id != job:
                continue
            job_dir = self.store.job_dir(listed.record.id)
            # The all-jobs TensorBoard reads the store's root: a job of another root is not in it.
            in_root = job_dir.parent == self.store.root
            record, tb_prefix = listed.record, listed.record.id if in_root else None
            phase, name = listed.status.phase, record.spec.name
            runs = self.runs.summaries(job_dir, record.id, name, phase, tb_prefix)
            hparams = record.spec.hparams
            runs += self.runs.mlflow_summaries(job_dir, record.id, name, phase, hparams, tb_prefix)
            if not runs and record.spec.hparams:
                runs = [
                    self.runs.job_run(
                        record.id, record.spec.name, listed.status, record.spec.hparams, tb_prefix
                    )
                ]
            out += runs
        return out

    def run_detail(
        self,
        job_id: str,
        run: str,
        since: int | None = None,
        limit: int | None = None,
        rank: int | None = None,
    ) -> RunDetail:
        """A run's record, artifacts, progress and a page of its points from byte ``since``."""
        job_dir = self.store.existing_dir(job_id)
        if run == JOB_RUN:
            return self._job_run_detail(job_id)
        phase = JobPhase(self.phase(job_id))
        if run.startswith(mlflowdb.PREFIX):
            limit = check_limit(limit)
            hparams = self.store.read_record(job_id).spec.hparams
            return self.runs.mlflow_detail(job_dir, job_id, run, phase, hparams, check_since(since), limit)
        return self.runs.detail(job_dir, job_id, run, phase, since, limit, rank)

    def _job_run_detail(self, job_id: str) -> RunDetail:
        record = self.store.read_record(job_id)
        status = self.detail(job_id).status
        data = job_record(status, record.spec.hparams)
        progress = RunProgress(step=None, total_steps=total_steps(data), eta_seconds=None)
        return RunDetail(job_id, JOB_RUN, data["status"], data, [], 0, False, [], progress, [])

    def open_artifact(self, job_id: str, run: str, path: str) -> IO[bytes]:
        """An artifact file of a run, opened without following a link out of the run's directory
        (opened here rather than handed out as a path: a link swapped in after a check of the
        path would be followed by whoever opened it next)."""
        return self.runs.open_artifact(self.store.existing_dir(job_id), run, path)

    # -- changing ------------------------------------------------------------------------------
    def submit(self, spec: JobSpec, script: str, files: dict[str, bytes] | None = None) -> str:
        return self.backend(spec.backend).submit(_with_arg_hparams(spec), script, files)

    def dryrun(self, spec: JobSpec, script: str, files: dict[str, bytes] | None = None) -> DryRun:
        return self.backend(spec.backend).dryrun(_with_arg_hparams(spec), script=script, files=files)

    def cancel(self, job_id: str) -> JobStatus:
        return self.backend_of(job_id).cancel(job_id)

    def delete(self, job_id: str, purge: bool = False) -> None:
        """Remove the job from its backend and the list; files stay unless ``purge``."""
        record = self.store.read_record(job_id)
        if self.store.is_deleted(job_id):
            if purge:
                self.store.purge(job_id)
            return
        self.backend(record.backend).delete(job_id, purge=purge)


def _with_arg_hparams(spec: JobSpec) -> JobSpec:
    """``spec`` with the ``--name value`` arguments after ``--`` among its hparams (they win over
    the notebook's dict: they are what the script reads)."""
    from_args = hparams.from_args(spec.args)
    if from_args:
        spec = dataclasses.replace(spec, hparams=hparams.merged(spec.hparams, from_args))
    return spec


def spec_from_words(
    *,
    gpus: int = 1,
    nodes: int = 1,
    name: str = "distrun",
    backend: str | None = None,
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    max_restarts: int = 0,
    working_dir: str | None = None,
    **fields: Any,
) -> JobSpec:
    """A ``JobSpec`` from the words users use (``gpus`` = processes per node)."""
    spec = JobSpec(
        name=name,
        nodes=nodes,
        nproc_per_node=gpus,
        backend=backend or default_backend_name(),
        args=list(args),
        env=dict(env or {}),
        max_restarts=max_restarts,
        working_dir=working_dir or os.getcwd(),
    )
    for key, value in fields.items():
        if key not in SPEC_FIELDS:
            raise InvalidSpecError(f"unknown job setting {key!r}")
        setattr(spec, key, value)
    return spec.validate()


def option_classes() -> list[type]:
    """Each backend's options, as the dataclasses that declare their flags."""
    from .backends.kubernetes.options import KubeOptions
    from .backends.local_options import LocalOptions
    from .backends.slurm.options import SlurmOptions

    return [LocalOptions, KubeOptions, SlurmOptions]


def job_flag_classes() -> list[type]:
    """Every flag of ``%%distrun`` and ``jupyter disttrain run``, in the order help lists them."""
    return [JobWords, *option_classes(), *launcher_option_classes(), RunWords]


def launcher_option_classes() -> list[type]:
    """Each launcher's options, as the dataclasses that declare their flags."""
    from .launchers import option_classes as launcher_options

    return launcher_options()


def _launcher_words(args: argparse.Namespace) -> dict[str, Any]:
    """``launcher`` and ``launcher_options`` from the flags: a launcher's own option given
    without ``--launcher`` chooses that launcher."""
    from .launchers import NAMES, launcher_class

    fields: dict[str, Any] = {}
    for name in NAMES:
        cls = launcher_class(name).options
        values = given(args, cls) if cls is not None else {}
        if values:
            fields["launcher_options"] = {**fields.get("launcher_options", {}), **values}
            fields.setdefault("launcher", name)
    if args.launcher:
        fields["launcher"] = args.launcher
    return fields


def choose_launcher(spec: JobSpec, explicit: bool, source: str) -> str | None:
    """Pick the launcher the script needs when none was asked for (a cell calling
    ``deepspeed.initialize`` runs under DeepSpeed's); the line saying so, or None."""
    from .launchers import DEFAULT, detect

    if explicit or spec.launcher != DEFAULT:
        return None
    found = detect(source)
    if found is None or found == spec.launcher:
        return None
    spec.launcher = found
    return f"launcher {found}: the script calls {found}.initialize (choose another with --launcher)"


def spec_from_flags(args: argparse.Namespace, script_args: Sequence[str], default_name: str) -> JobSpec:
    """The job the flags of ``job_flag_classes`` ask for, whichever front end parsed them."""
    options: dict[str, Any] = {}
    for cls in option_classes():
        options.update(given(args, cls))
    fields: dict[str, Any] = {"accelerator": args.accelerator, **_launcher_words(args)}
    for key in ("image", "cpu", "memory"):
        if getattr(args, key) is not None:
            fields[key] = getattr(args, key)
    if args.pvc:
        fields["volumes"] = [Volume.parse(v) for v in args.pvc]
    return spec_from_words(
        gpus=args.gpus,
        nodes=args.nodes,
        name=args.name or default_name,
        backend=args.backend,
        args=script_args,
        env=dict(args.env),
        max_restarts=args.max_restarts,
        options=options,
        **fields,
    )


_managers: dict[JobStore, JobManager] = {}
_managers_lock = threading.Lock()


def manager_for(store: JobStore) -> JobManager:
    """The manager of ``store`` in this process (equal stores share one, and their backends)."""
    with _managers_lock:
        manager = _managers.get(store)
        if manager is None:
            manager = _managers[store] = JobManager(store)
        return manager
