"""A job's runs (em's, MLflow's, its own) and their metrics, artifacts and progress; TensorBoard."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model.specs import JobPhase
from . import absent
from .monitoring import ResourceHours

# TensorBoard id meaning every job's runs side by side (not a valid job id: ids are DNS labels).
ALL_JOBS = "_all"
# The run a job with no run of em shows its hyper-parameters (and MLflow metrics) as; not a
# valid run name (those start with a letter or digit), so it never hides one.
JOB_RUN = "_job"
# A metric value as JSON has it: a number, or "NaN", "Infinity", "-Infinity" (JSON has none of them).
MetricValue = float | str


@dataclass
class RunSummary:
    """One run of a job's experiment tracking (``em``), as the runs table shows it.

    ``status`` is the run's own (running, finished, failed), or interrupted when its job has
    ended with the run still open (a process killed before it could write its end).
    ``metrics`` maps ``<type>/<name>`` to its last value; ``step`` is the last step logged;
    ``total_steps`` comes from ``create_run(..., total_steps=N)`` or an hparam ``total_steps`` or
    ``max_steps``; ``eta_seconds`` is known while it runs with a total. ``tensorboard_run`` is
    the run's path in the all-jobs TensorBoard (``ALL_JOBS``; a run recorded by every rank has
    one TensorBoard run per rank below it, ``rank-N``), null for a job outside its log dir (and
    for an MLflow run until the launcher wrote its scalars, ``mlflowtb``).
    """

    job_id: str
    job_name: str
    job_phase: JobPhase
    run: str
    status: str
    start_time: str | None
    end_time: str | None
    hparams: dict[str, Any]
    metrics: dict[str, MetricValue]
    step: int | None
    total_steps: int | None
    eta_seconds: float | None
    artifacts: int
    tensorboard_run: str | None
    # What its job held and used (and the jobs it was resumed from: one run across them).
    hours: ResourceHours | None = absent()  # noqa: RUF009 (a field() with metadata)


@dataclass
class RunList:
    """Every run of every listed job (or of one job), newest job first."""

    runs: list[RunSummary]


@dataclass
class RunPoint:
    """One logged metric point; ``flags`` has step_backwards when its step went back (kept)."""

    type: str
    name: str
    value: MetricValue
    step: int | None
    epoch: int | None
    time: float
    flags: list[str]


@dataclass
class ArtifactFile:
    """A file of a run's artifact ``name``; ``path`` is relative to the run's artifacts, the
    download is ``GET .../runs/<run>/artifacts/<path>``."""

    name: str
    path: str
    size: int
    sha256: str | None


@dataclass
class RunProgress:
    """The last step logged, the total when known, and the estimated seconds left while it runs."""

    step: int | None
    total_steps: int | None
    eta_seconds: float | None


@dataclass
class RunDetail:
    """A run's record (``run.json``) and a page of its metric points from offset ``since``.

    Pass ``next`` as ``since`` to read on (each point comes once); ``more`` says the page
    stopped at its point or byte limit with more already written. ``ranks`` lists the ranks
    with their own metrics (a run made with ``ranks="all"``; ``rank=N`` reads one, rank 0 by
    default), empty when rank 0 alone records.
    """

    job_id: str
    run: str
    status: str
    record: dict[str, Any]
    points: list[RunPoint]
    next: int
    more: bool
    artifacts: list[ArtifactFile]
    progress: RunProgress
    ranks: list[int]
    # The steps where the curve continues from a checkpoint, oldest first: a run resumed from
    # another job's (``record.resumed_from``: that run's points up to the step come first, in
    # the same pages) and each restart of the job from its own (``record.restarts``: the earlier
    # attempt's points past the step are left out). Each step shows once.
    resumed_at: list[int] = field(default_factory=list)


@dataclass
class RunQuery:
    """The query of a run's points: from byte offset ``since``, at most ``limit`` points, of ``rank``."""

    since: int | None = None
    limit: int | None = None
    rank: int | None = None


@dataclass
class TensorBoardInfo:
    """A TensorBoard of a job (or of every job, ``ALL_JOBS``): the page to open (``url``), the log
    dir it reads, and whether it runs now (``pid``, ``started`` in seconds since the epoch)."""

    id: str
    url: str
    logdir: str
    running: bool
    pid: int | None
    started: float | None
    reload_interval: float


@dataclass
class TensorBoardList:
    """The TensorBoards started (and not stopped since)."""

    tensorboards: list[TensorBoardInfo]
