"""The answers about a job: its summary and details, its logs, its values and debugger prompt, and
what submit, a dry run, resume and cancel answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from ..model.failure import first_line
from ..model.progress import Progress
from ..model.specs import DryRun, JobPhase, JobSpec, JobStatus, LogLine, LogRun, request_device
from ..storage.store import JobRecord
from . import absent
from .checkpoints import Checkpoint, CheckpointUsage
from .monitoring import GuardState, IncidentSummary, ResourceHours


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
    launcher: str = JobSpec.launcher
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
class ResumeAnswer:
    """A job started by ``POST jobs/<id>/resume``: its id, summary, and the checkpoint it resumes from."""

    id: str
    job: JobSummary
    checkpoint: Checkpoint


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
