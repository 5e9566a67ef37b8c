"""What the REST API answers, typed once.

The server builds these and sends ``to_json(...)`` of them; ``labextension/types.ts`` is
generated from them and the types of ``specs.py`` by ``scripts/gen_types.py`` (a test fails
when the checked-in file is stale), so the lab extension cannot drift from the server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .specs import JobPhase, JobSpec, JobStatus, LogLine, LogRun, request_device, to_plain
from .store import JobRecord

# TensorBoard id meaning every job's runs side by side (not a valid job id: ids are DNS labels).
ALL_JOBS = "_all"


@dataclass
class JobSummary:
    """The one-line view of a job the list shows."""

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

    @classmethod
    def of(cls, record: JobRecord, status: JobStatus, deleted: bool = False) -> JobSummary:
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
            message=status.message,
            deleted=deleted,
            launcher=spec.launcher,
        )


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
class JobDetail:
    """Spec, launch request and status of one job; ``backend_error`` says why the status is the
    stored one (the backend could not be reached or loaded)."""

    id: str
    summary: JobSummary
    spec: JobSpec
    request: dict[str, Any]
    status: JobStatus
    deleted: bool
    backend_error: str | None = None
    roles: list[RoleSummary] = field(default_factory=list)


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


def to_json(payload: Any) -> dict[str, Any]:
    """A payload (a dataclass) as the plain JSON object the API sends."""
    plain: dict[str, Any] = to_plain(payload)
    return plain
