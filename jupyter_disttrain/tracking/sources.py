"""Where a job's runs come from: one strategy per source, behind one interface.

- ``EmRuns``: the runs of ``em``, ``<job dir>/runs/<run>/`` (read by ``runs.RunsReader``);
- ``MlflowRuns``: the runs MLflow recorded in the job's ``mlflow.db`` (``mlflowdb``), named
  ``mlflow-<run id>``; the job's captured hyper-parameters under each run's params;
- ``JobOwnRun``: the run ``_job`` of a job that made no other run: its captured hparams.

``RunSources`` lists a job's runs (em's and MLflow's side by side, else the job's own) and
gives a run's detail from the source that owns its name.
"""

from __future__ import annotations

import abc
import os
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..model.errors import UnknownRunError
from ..model.specs import JobPhase, JobStatus
from ..payloads.runs import JOB_RUN, RunDetail, RunProgress, RunQuery, RunSummary
from ..runtime.contract import MLFLOW_DB, RUNS_DIR, TENSORBOARD_DIR
from . import mlflowdb
from .runs import RunsReader, check_limit, check_since, epoch_seconds, run_status, total_steps

SETTLED_SECONDS = 30.0  # after its end, a job's runs are taken as written
MAX_SETTLED = 20_000  # jobs whose rows are kept


@dataclass(frozen=True)
class JobRuns:
    """A job as the run sources read it."""

    job_dir: Path
    job_id: str
    job_name: str
    status: JobStatus
    hparams: dict[str, Any]  # captured at submit (``JobSpec.hparams``)
    tb_prefix: str | None = None  # the job's dir in the all-jobs TensorBoard; None: not in it


class RunSource(abc.ABC):
    """One kind of run a job may have."""

    @abc.abstractmethod
    def owns(self, run: str) -> bool:
        """Whether a run of this name would be one of this source's."""

    @abc.abstractmethod
    def summaries(self, job: JobRuns) -> list[RunSummary]:
        """The job's runs of this source, as rows of the runs table."""

    @abc.abstractmethod
    def detail(self, job: JobRuns, run: str, query: RunQuery) -> RunDetail:
        """A run's record, progress and a page of its points (from byte, or row, ``query.since``)."""


class EmRuns(RunSource):
    """The runs ``em`` wrote into the job dir: every name that is no other source's."""

    def __init__(self, reader: RunsReader) -> None:
        self.reader = reader

    def owns(self, run: str) -> bool:
        return True

    def summaries(self, job: JobRuns) -> list[RunSummary]:
        return self.reader.summaries(job.job_dir, job.job_id, job.job_name, job.status.phase, job.tb_prefix)

    def detail(self, job: JobRuns, run: str, query: RunQuery) -> RunDetail:
        phase = job.status.phase
        return self.reader.detail(job.job_dir, job.job_id, run, phase, query.since, query.limit, query.rank)


class MlflowRuns(RunSource):
    """The runs MLflow recorded in the job's database; ``tensorboard_run`` once the launcher wrote
    the run's scalars (``mlflowtb``)."""

    def owns(self, run: str) -> bool:
        return run.startswith(mlflowdb.PREFIX)

    def summaries(self, job: JobRuns) -> list[RunSummary]:
        out = []
        for found in mlflowdb.runs(job.job_dir):
            record = _mlflow_record(found, job.hparams, job.status.phase)
            written = job.tb_prefix and (job.job_dir / TENSORBOARD_DIR / found.name).is_dir()
            out.append(
                RunSummary(
                    job_id=job.job_id,
                    job_name=job.job_name,
                    job_phase=job.status.phase,
                    run=found.name,
                    status=record["status"],
                    start_time=found.start_time,
                    end_time=found.end_time,
                    hparams=record["hparams"],
                    metrics={f"mlflow/{k}": v for k, v in sorted(found.metrics.items())},
                    step=found.step,
                    total_steps=total_steps(record),
                    eta_seconds=None,
                    artifacts=0,
                    tensorboard_run=f"{job.tb_prefix}/{TENSORBOARD_DIR}/{found.name}" if written else None,
                )
            )
        return out

    def detail(self, job: JobRuns, run: str, query: RunQuery) -> RunDetail:
        limit = check_limit(query.limit)
        since = check_since(query.since)
        found = mlflowdb.find(job.job_dir, run)
        if found is None:
            raise UnknownRunError(
                f"job {job.job_id} has no MLflow run {run!r} (see GET .../runs?job={job.job_id})"
            )
        record = _mlflow_record(found, job.hparams, job.status.phase)
        points, nxt, more = mlflowdb.points(job.job_dir, found.uuid, since, limit)
        progress = RunProgress(step=found.step, total_steps=total_steps(record), eta_seconds=None)
        return RunDetail(job.job_id, run, record["status"], record, points, nxt, more, [], progress, [])


class JobOwnRun(RunSource):
    """The run ``_job``: a job's captured hparams, with its phase and times, when it made no run
    of its own (a script that never calls ``em`` or MLflow)."""

    def owns(self, run: str) -> bool:
        return run == JOB_RUN

    def summaries(self, job: JobRuns) -> list[RunSummary]:
        if not job.hparams:
            return []
        record = job_record(job.status, job.hparams)
        return [
            RunSummary(
                job_id=job.job_id,
                job_name=job.job_name,
                job_phase=job.status.phase,
                run=JOB_RUN,
                status=record["status"],
                start_time=record["start_time"],
                end_time=record["end_time"],
                hparams=job.hparams,
                metrics={},
                step=None,
                total_steps=total_steps(record),
                eta_seconds=None,
                artifacts=0,
                tensorboard_run=f"{job.tb_prefix}/{TENSORBOARD_DIR}" if job.tb_prefix else None,
            )
        ]

    def detail(self, job: JobRuns, run: str, query: RunQuery) -> RunDetail:
        data = job_record(job.status, job.hparams)
        progress = RunProgress(step=None, total_steps=total_steps(data), eta_seconds=None)
        return RunDetail(job.job_id, JOB_RUN, data["status"], data, [], 0, False, [], progress, [])


class RunSources:
    """Every source of a job's runs.

    A job that ended a while ago (``SETTLED_SECONDS``) has runs that no longer change, so their
    rows are read once and kept while its phase and end stay the same: a listing of 1,000 runs
    then reads the files of the running jobs only (bench/bench_views.py times it)."""

    def __init__(self, reader: RunsReader) -> None:
        self.em, self.mlflow, self.own = EmRuns(reader), MlflowRuns(), JobOwnRun()
        self._settled: dict[Path, tuple[tuple[Any, ...], list[RunSummary]]] = {}
        self._lock = threading.Lock()

    def summaries(self, job: JobRuns) -> list[RunSummary]:
        """em's and MLflow's runs side by side; the job's own run when there is neither."""
        key = _settled_key(job)
        if key is not None:
            with self._lock:
                hit = self._settled.get(job.job_dir)
            if hit is not None and hit[0] == key:
                return _copies(hit[1])
        rows = (self.em.summaries(job) + self.mlflow.summaries(job)) or self.own.summaries(job)
        if key is None:
            return rows
        with self._lock:
            if len(self._settled) >= MAX_SETTLED:  # jobs deleted since: start afresh
                self._settled.clear()
            self._settled[job.job_dir] = (key, rows)
        return _copies(rows)

    def detail(self, job: JobRuns, run: str, query: RunQuery) -> RunDetail:
        source = next(s for s in (self.own, self.mlflow, self.em) if s.owns(run))
        return source.detail(job, run, query)


def _copies(rows: list[RunSummary]) -> list[RunSummary]:
    """Rows a caller may change without changing the kept ones."""
    return [replace(row, hparams=dict(row.hparams), metrics=dict(row.metrics)) for row in rows]


def _settled_key(job: JobRuns) -> tuple[Any, ...] | None:
    """What a settled job's rows depend on; None while it runs or ended only just now (its
    processes may still be writing their runs' ends: a cancel's grace, a slow file system).
    Past that, a run dir made or removed (the ``runs`` dir's stamp) or an MLflow database
    written (its own) still makes the rows read again."""
    status = job.status
    if not status.phase.is_terminal:
        return None
    ended = epoch_seconds(status.finish_time) if status.finish_time else None
    if ended is None or time.time() - ended < SETTLED_SECONDS:
        return None
    stamps = (_stamp(job.job_dir / RUNS_DIR), _stamp(job.job_dir / MLFLOW_DB))
    return (status.phase, status.finish_time, job.tb_prefix, stamps)  # kept per job dir


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


_JOB_STATUS = {JobPhase.SUCCEEDED: "finished", JobPhase.FAILED: "failed", JobPhase.CANCELLED: "failed"}


def job_record(status: JobStatus, hparams: dict[str, Any]) -> dict[str, Any]:
    """What stands for ``run.json`` in the ``JOB_RUN`` of a job: its hparams, its times."""
    return {
        "name": JOB_RUN,
        "hparams": hparams,
        "status": _JOB_STATUS.get(status.phase, "running"),
        "start_time": status.start_time,
        "end_time": status.finish_time,
    }


def _mlflow_record(found: mlflowdb.MlflowRun, hparams: dict[str, Any], phase: JobPhase) -> dict[str, Any]:
    """What stands for ``run.json`` in an MLflow run: its params over the job's hparams."""
    record = {
        "name": found.name,
        "mlflow_run_id": found.uuid,
        "hparams": {**hparams, **found.params},
        "status": found.status,
        "start_time": found.start_time,
        "end_time": found.end_time,
    }
    record["status"] = run_status(record, phase)
    return record
