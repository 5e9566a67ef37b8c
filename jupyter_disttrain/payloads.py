"""What the REST API answers, typed once.

The server builds these and sends ``to_json(...)`` of them; ``labextension/rest/types.ts`` is
generated from them and the types of ``model/specs.py`` by ``scripts/gen_types.py`` (a test fails
when the checked-in file is stale), so the lab extension cannot drift from the server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from .model.failure import first_line
from .model.progress import Progress
from .model.specs import (
    ABSENT_WHEN_NONE,
    DryRun,
    JobPhase,
    JobSpec,
    JobStatus,
    LogLine,
    LogRun,
    ResumedFrom,
    request_device,
    to_plain,
)
from .storage.store import JobRecord

# TensorBoard id meaning every job's runs side by side (not a valid job id: ids are DNS labels).
ALL_JOBS = "_all"
# The run a job with no run of em shows its hyper-parameters (and MLflow metrics) as; not a
# valid run name (those start with a letter or digit), so it never hides one.
JOB_RUN = "_job"


def absent() -> Any:
    """A field left out of the JSON when None (``ABSENT_WHEN_NONE``)."""
    return field(default=None, metadata={ABSENT_WHEN_NONE: True})


@dataclass
class JobSummary:
    """The one-line view of a job the list shows; ``message`` is its status message's first line
    (the headline; the details have the rest); ``tensorboard`` whether it wrote TensorBoard event
    files (what "Open TensorBoard" is offered for)."""

    id: str
    name: str
    backend: str
    phase: JobPhase
    created: str | None
    start_time: str | None
    finish_time: str | None
    replicas_ready: int
    replicas_total: int
    nodes: int
    nproc_per_node: int
    gpus: int
    reason: str | None
    message: str | None
    deleted: bool = False
    launcher: str = "torchrun"
    quiet: list[str] = field(default_factory=list)  # running replicas silent for longer than usual
    progress: Progress | None = absent()  # noqa: RUF009 (while it runs: em's total, else a tqdm bar)
    tensorboard: bool = False
    guard: GuardState | None = absent()  # noqa: RUF009 (while it runs: stalled or idle, if it is)

    @classmethod
    def of(
        cls,
        record: JobRecord,
        status: JobStatus,
        deleted: bool = False,
        quiet: list[str] | None = None,
        progress: Progress | None = None,
        tensorboard: bool = False,
        guard: GuardState | None = None,
    ) -> JobSummary:
        spec = record.spec
        # The backend records where the job really runs ("cpu" when no GPU was visible or chosen).
        on_cpu = spec.accelerator == "cpu" or request_device(record.request) == "cpu"
        return cls(
            id=record.id,
            name=spec.name,
            backend=spec.backend,
            phase=status.phase,
            created=status.created or record.created,
            start_time=status.start_time,
            finish_time=status.finish_time,
            replicas_ready=status.replicas_ready,
            replicas_total=len(status.replicas) or spec.world_size,
            nodes=spec.nodes,
            nproc_per_node=spec.nproc_per_node,
            gpus=0 if on_cpu else spec.world_size,
            reason=status.reason,
            message=first_line(status.message) or None,
            deleted=deleted,
            launcher=spec.launcher,
            quiet=quiet or [],
            progress=progress,
            tensorboard=tensorboard,
            guard=guard,
        )


@dataclass(frozen=True)
class JsonOf:
    """Marks a ``dict`` field (``Annotated[dict[str, Any], JsonOf(Shape)]``) that holds the JSON
    of ``Shape`` made earlier: a cached one, or a typed object's own ``to_json``. The JSON is
    sent as it is; ``types.ts`` gives the field the shape's type."""

    shape: type


@dataclass
class ServerInfo:
    """What the UI needs to know once: the version, the job root and the backends."""

    version: str
    job_root: str
    default_backend: str
    backends: list[str]


@dataclass
class JobList:
    """Every job not deleted, newest first, and the job roots searched (``roots``: where an empty
    list looked)."""

    jobs: list[Annotated[dict[str, Any], JsonOf(JobSummary)]]  # each made once (``Listed.summary``)
    roots: list[str]


@dataclass
class SubmitAnswer:
    """A job created by ``POST jobs``: its id and summary."""

    id: str
    job: JobSummary


@dataclass
class DryRunAnswer:
    """What ``POST jobs`` with ``dry_run`` would carry out; nothing was created."""

    dry_run: Annotated[dict[str, Any], JsonOf(DryRun)]  # its request is the backend's own JSON


@dataclass
class CancelAnswer:
    """The job's status after a cancel."""

    status: JobStatus


@dataclass
class RoleSummary:
    """One role of a job (``worker``; ``scheduler``, ``server``...) and how many replicas it has."""

    name: str
    replicas: int

    @classmethod
    def of(cls, record: JobRecord, status: JobStatus) -> list[RoleSummary]:
        """The roles the launcher laid out (in the request), else those of the replicas."""
        laid_out = record.request.get("roles") or []
        if laid_out:
            return [cls(str(r["name"]), int(r["replicas"])) for r in laid_out]
        counts: dict[str, int] = {}
        for replica in status.replicas:
            counts[replica.role] = counts.get(replica.role, 0) + 1
        return [cls(name, n) for name, n in counts.items()]


@dataclass
class Failure:
    """Why a job failed, told as the notebook's own error would be: the root-cause replica, a
    one-line ``headline`` (what the list, notifications and events show), the exception and the
    cell and line it was raised from, its traceback as IPython renders a cell's error
    (``Cell In[3], line 9``, the product's frames dropped, ANSI colours; empty when its log has
    none) and as the log has it (``raw``), and the replicas that only stopped because it left
    (``stopped_by_peer``); ``message``: the exception's own message (the cell raises the rank's
    type with it, ``jobs/errors.py``)."""

    replica: str
    headline: str
    exception: str | None
    cell: str | None
    line: int | None
    traceback: str
    raw: str
    stopped_by_peer: list[str]
    message: str | None = absent()  # the exception's message as the rank printed it

    def stopped_by(self, replica: str) -> str | None:
        """The root cause when ``replica`` only stopped because it left, else None (a failure of
        its own, or no failure): what every front end shows of ``replica``."""
        return self.replica if self.replica and replica in self.stopped_by_peer else None


@dataclass
class KeptValue:
    """A value ``--out``/``--out-all`` brought back (``jobs/values.py``): its name, the rank it
    came from, its kind (``module``, ``optimizer``, ``value``), type and size on disk; or, with
    ``refused``, why it did not come back."""

    name: str
    rank: int
    kind: str
    type: str
    bytes: int
    refused: str | None = None


@dataclass
class DebugAnswer:
    """A rank's debugger after one exchange (``POST jobs/<id>/debug/<replica>``): pdb's output
    up to its next prompt; ``open`` false once pdb went on; ``quit`` when the job is being
    cancelled from it."""

    replica: str
    output: str
    open: bool
    quit: bool


@dataclass
class JobDetail:
    """Spec, launch request and status of one job; ``backend_error`` says why the status is the
    stored one (the backend could not be reached or loaded); ``failure``: why it failed (absent
    while it has not)."""

    id: str
    summary: JobSummary
    spec: JobSpec
    request: dict[str, Any]
    status: JobStatus
    deleted: bool
    backend_error: str | None = None
    roles: list[RoleSummary] = field(default_factory=list)
    failure: Failure | None = absent()  # noqa: RUF009 (a field() with metadata)
    checkpoints: CheckpointUsage | None = None  # None where the job's checkpoints cannot be read here
    values: list[KeptValue] = field(default_factory=list)  # --out: what came back (docs/notebook.md)
    incidents: list[IncidentSummary] = field(default_factory=list)  # its diagnoses, newest first
    hours: ResourceHours | None = absent()  # noqa: RUF009 (what it held and used; absent: no samples)


@dataclass
class JobScript:
    """The job's packaged script."""

    id: str
    entrypoint: str
    script: str


@dataclass
class LogPage:
    """A chunk of log lines; ``offset`` resumes after the last one, ``done`` once the job has
    ended and every line was returned, ``more`` when the page stopped at its line or byte limit
    with more lines there already."""

    lines: list[LogLine]
    offset: str
    done: bool
    more: bool


@dataclass
class LogRunsPage:
    """A log page in runs of one replica (the event stream's unit)."""

    runs: list[LogRun]
    offset: str
    done: bool
    count: int
    more: bool


@dataclass
class LogQuery:
    """The query of a log read: one replica or all, from an offset or the last ``tail`` lines."""

    replica: str | None = None
    offset: str | None = None
    tail: int | None = None
    limit: int | None = None


@dataclass
class GpuSample:
    """One GPU a rank uses, as NVML reports it: utilisation over the last sample period, memory,
    and the device's name (``NVIDIA H200``; absent where NVML cannot say, and in older samples)."""

    index: int
    util_percent: float
    mem_used_bytes: int
    mem_total_bytes: int
    name: str | None = absent()


@dataclass
class ResourceSample:
    """One sample of a rank's process tree (the rank and its children, e.g. DataLoader workers).

    ``t`` is in seconds since the epoch; ``cpu_percent`` is of one core (200 = two cores busy);
    I/O bytes are cumulative. ``gpus`` and ``gpu_mem_bytes`` (the tree's own GPU memory) are
    absent where the rank has no GPU or NVML cannot be read.
    """

    t: float
    cpu_percent: float
    rss_bytes: int
    threads: int
    read_bytes: int
    write_bytes: int
    gpus: list[GpuSample] | None = absent()  # noqa: RUF009 (a field() with metadata)
    gpu_mem_bytes: int | None = absent()


@dataclass
class ReplicaResources:
    """One replica's samples and liveness: when it last wrote output and made progress (an em
    metric or a TensorBoard event), and whether it has been silent for much longer than usual."""

    samples: list[ResourceSample]
    ended: bool
    last_output: float | None
    last_progress: float | None
    quiet: bool


@dataclass
class Resources:
    """Every replica's resource samples newer than the query's ``since`` (at most ``MAX_POINTS``
    each, thinned evenly); ``source`` is where they come from (``sampler``: the job's own,
    ``metrics.k8s.io``: the cluster's, CPU and memory only; null: none) and ``message`` why
    there are none or fewer. Ask again with ``since=now`` for what is new."""

    interval: float
    now: float
    source: str | None
    message: str | None
    replicas: dict[str, ReplicaResources]


@dataclass
class StackDump:
    """The Python stacks of every thread of one rank (or of each rank in a pod), and how they
    were taken (``py-spy`` or ``faulthandler``); ``note`` says why the fallback was used. The job
    layer names the script's lines by their cells and folds the product's frames in ``text``;
    ``raw`` is the dump as taken."""

    replica: str
    method: str
    text: str
    note: str | None
    raw: str | None = None


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
class Checkpoint:
    """One checkpoint of a job (README "Checkpoints"): found in its checkpoint dir or declared by
    ``run.checkpoint(path)``.

    ``id`` is stable (the same checkpoint keeps it across listings) and names it in the
    download, load and resume routes. ``kind`` is ``torch`` (a ``torch.save`` file),
    ``lightning`` (a ``.ckpt``), ``deepspeed`` (a tag directory of a save dir with ``latest``),
    ``dcp`` (a ``torch.distributed.checkpoint`` directory) or ``files`` (a directory of files saved
    together: ``step_300/{model,optim}.pt``, an HF Trainer ``checkpoint-300/``). ``complete`` is
    false while its files are still being written (a DCP dir without ``.metadata``, a DeepSpeed tag
    newer than ``latest``, a zip without its end record). ``step_source`` says where ``step``
    came from: ``name`` (the file name), ``metadata`` (what the file records), ``declared``
    (``run.checkpoint``), ``em`` (the step the run logged last before it was written).
    ``metrics``: the run's last value of each ``<type>/<name>`` at or before ``step``.
    ``world_size``: the ranks that wrote it where the format says (DeepSpeed ZeRO shards).
    ``pinned``: a resume points at it, so retention keeps it.
    """

    id: str
    path: str
    kind: str
    step: int | None
    epoch: int | None
    time: str | None
    size: int
    complete: bool
    metrics: dict[str, MetricValue]
    run: str | None
    declared: bool
    step_source: str | None
    world_size: int | None
    pinned: bool


@dataclass
class CheckpointUsage:
    """How many checkpoints a job has, the disk they use (bytes), what ``--keep-checkpoints``
    keeps (0: all), and the id of the newest complete one (what ``latest`` resumes from).
    ``more``: the listing stopped at its budget of directory entries, so there are more
    checkpoints (and bytes) than counted."""

    count: int
    complete: int
    bytes: int
    keep: int
    latest: str | None
    more: bool = False


@dataclass
class CheckpointList:
    """A job's checkpoints, oldest first (by step, then time), where it writes them (``dir``, its
    ``DISTTRAIN_CHECKPOINT_DIR``), their usage, and the checkpoint the job itself started from."""

    job_id: str
    dir: str
    checkpoints: list[Checkpoint]
    usage: CheckpointUsage
    resumed_from: ResumedFrom | None


@dataclass
class ResumeAnswer:
    """A job started by ``POST jobs/<id>/resume``: its id, summary, and the checkpoint it resumes from."""

    id: str
    job: JobSummary
    checkpoint: Checkpoint


@dataclass
class CheckpointCode:
    """The code of a notebook cell that loads a checkpoint in the kernel ("Load in notebook").

    ``model_class`` is the model class the job's script defined and the code rebuilds (null
    when there was none to find: the code then loads the state dict only); ``note`` says what
    the code assumes.
    """

    job_id: str
    checkpoint: str
    code: str
    model_class: str | None
    note: str | None


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


@dataclass
class RankDiagnosis:
    """One rank in a diagnosis: its ``state`` (``not joined``: a collective its peers wait in;
    ``waiting`` in one; ``mismatch``: it called one differently; ``running``: outside any;
    ``no answer``: its socket did not answer; ``no record``: no Flight Recorder, stacks only), the
    collective concerned (``all_reduce #5 (default group)``), where it is in the notebook's words
    (``Cell In[4], line 2``) and that line's text, why something could not be read (``note``),
    and its stacks with the script's lines named by their cells."""

    replica: str
    state: str
    collective: str | None
    where: str | None
    source: str | None
    note: str | None
    stack: str | None


@dataclass
class IncidentSummary:
    """One diagnosis of a job as its details list them: its name (its file under the job dir's
    ``incidents/``), when it was made, what asked for it (``manual``, ``stalled``, ``idle``) and
    its verdict."""

    name: str
    time: str
    trigger: str
    verdict: str


@dataclass
class Incident:
    """A diagnosis: which rank is stuck, in which collective, at which cell line, in one
    ``verdict`` sentence; each rank's part; which analysis named the collective (``torch``: torch's
    Flight Recorder analyzer, ``disttrain``: ours where it cannot run, ``none``: no rank has a
    record) and how long collecting and analysing took."""

    job_id: str
    name: str
    time: str
    trigger: str
    verdict: str
    analyzer: str
    seconds: float
    ranks: list[RankDiagnosis]
    notes: list[str]


@dataclass
class GuardState:
    """What the stall and idle guard says of a running job: ``stalled`` (no progress for
    ``threshold`` seconds; ``busy`` when its processes keep a CPU or GPU busy meanwhile) or
    ``idle`` (its accelerators, or its CPUs for a CPU job, under the idle threshold over the
    window), since when (seconds since the epoch), the action it takes (``notify``, ``diagnose``,
    ``cancel``) and the incident its diagnosis wrote, if any."""

    state: str
    since: float
    message: str
    busy: bool
    action: str
    threshold: float | None = None
    incident: str | None = None


@dataclass
class ResourceHours:
    """What a job or run held and used: ``unit`` ``gpu`` (GPU-hours) or ``core`` (CPU core-hours
    for a CPU job); ``allocated`` is what it held (devices times the hours its processes ran),
    ``used`` what it kept busy (GPU utilisation, CPU time), summed over restarts and resumes;
    ``cost`` by the price table (absent without one)."""

    unit: str
    allocated: float
    used: float
    cost: float | None = absent()
    currency: str | None = absent()


def to_json(payload: Any) -> dict[str, Any]:
    """A payload (a dataclass) as the plain JSON object the API sends."""
    plain: dict[str, Any] = to_plain(payload)
    return plain
