"""The job model: what to run (``JobSpec``) and how it is going (``JobStatus``).

Pure data, no I/O and no Jupyter: the magic, the CLI, the server and every backend speak
these types. Each type round-trips through plain JSON (``to_dict``/``from_dict``), which is
how the job store keeps them on disk and how the REST API serves them.
"""

from __future__ import annotations

import calendar
import dataclasses
import functools
import json
import keyword
import re
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol, TypeVar

from ..launchers.names import DEFAULT as DEFAULT_LAUNCHER
from ..launchers.names import NAMES as LAUNCHERS
from .errors import InvalidSpecError

# Kubernetes DNS-1123 label; job ids become pod, Service and ConfigMap names, so the name
# leaves room for the id suffix and for the backends' own suffixes ("-worker-12").
_DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
MAX_NAME_LEN = 40
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

SCRIPT_NAME = "train.py"
# The script sits next to the store's own files (job.json, status.json, logs/...): a plain
# ``.py`` name can never be one of them nor reach outside the job dir.
_ENTRYPOINT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*\.py")

# Variables the product and torchrun set for each process: a user value would hide the ranks
# from cancel (DISTTRAIN_JOB_ID) or break the rendezvous, so ``--env`` may not set them.
RESERVED_ENV = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_NAME",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)
RESERVED_ENV_PREFIXES = ("DISTTRAIN_", "TORCHELASTIC_")


def validate_env_name(key: str) -> str:
    """Return ``key`` if ``--env`` may set it, else raise a one-line error naming it."""
    if not isinstance(key, str) or not _ENV_KEY.fullmatch(key):
        raise InvalidSpecError(f"env {key!r}: names are letters, digits and '_', not starting with a digit")
    if key in RESERVED_ENV or key.startswith(RESERVED_ENV_PREFIXES):
        raise InvalidSpecError(
            f"env {key!r} is set by torchrun or jupyter_disttrain for each process and cannot be "
            "overridden; pass your value under another name"
        )
    return key


# A job's hyper-parameters (``JobSpec.hparams``) go to every rank as JSON in an environment
# variable: far below Linux's 128 KiB.
HPARAMS_MAX_KEYS = 200
HPARAMS_MAX_BYTES = 16 * 1024


def check_hparams(values: Any) -> dict[str, Any]:
    """A spec's ``hparams`` as sent (REST, the Python API): names to scalars, bounded."""
    if not isinstance(values, dict) or not all(isinstance(k, str) for k in values):
        raise InvalidSpecError("hparams must be an object of names to values, e.g. {'lr': 0.1}")
    bad = next(
        (k for k, v in values.items() if not isinstance(v, bool | int | float | str | type(None))), None
    )
    if bad is not None:
        raise InvalidSpecError(f"hparams.{bad} must be a number, a string, true/false or null")
    if len(values) > HPARAMS_MAX_KEYS or len(json.dumps(values)) > HPARAMS_MAX_BYTES:
        raise InvalidSpecError(
            f"hparams: at most {HPARAMS_MAX_KEYS} of them and {HPARAMS_MAX_BYTES} bytes as JSON"
        )
    return values


def validate_entrypoint(entrypoint: str) -> str:
    """The script's file name: a plain ``.py`` name, never a store file or a path."""
    if not isinstance(entrypoint, str) or not _ENTRYPOINT.fullmatch(entrypoint):
        raise InvalidSpecError(
            f"entrypoint {entrypoint!r} must be a plain Python file name like 'train.py' "
            "(no directory, no leading '.')"
        )
    return entrypoint


class JobPhase(str, Enum):
    """Lifecycle of a job and of each of its replicas."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in (JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.CANCELLED)

    def __str__(self) -> str:
        return self.value


def validate_name(name: str) -> str:
    """Return ``name`` if it is a valid job name, else raise a one-line, actionable error."""
    if not isinstance(name, str) or not name:
        raise InvalidSpecError("the job name is empty; give --name a value like 'mnist-ddp'")
    if len(name) > MAX_NAME_LEN or not _DNS1123.fullmatch(name):
        raise InvalidSpecError(
            f"job name {name!r} is not a DNS-1123 label: use at most {MAX_NAME_LEN} lower-case "
            "letters, digits and '-', starting and ending with a letter or digit (e.g. 'mnist-ddp')"
        )
    return name


# A job's defaults are JobSpec's (the flags, the Python API and the REST spec derive theirs from it).
DEFAULT_NAME = "distrun"  # a cell's job without --name
ACCELERATORS = ("auto", "gpu", "cpu")  # --accelerator; the first is the default


def name_from(text: str, default: str = DEFAULT_NAME) -> str:
    """A valid job name made of ``text`` (a script's file name): lower case, each run of other
    characters one '-', cut to the length a name may have; ``default`` when nothing is left."""
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:MAX_NAME_LEN].rstrip("-")
    return name or default


def validate_job_id(job_id: str) -> str:
    """Job ids name directories and cluster objects: the same rule as names, a bit longer."""
    if not isinstance(job_id, str) or len(job_id) > 63 or not _DNS1123.fullmatch(job_id):
        raise InvalidSpecError(f"{job_id!r} is not a job id (ids look like 'mnist-ddp-k3x9q')")
    return job_id


def now_iso(at: float | None = None) -> str:
    """UTC timestamp with milliseconds, the one time format of records and the API (of now, or
    of the epoch seconds ``at``)."""
    t = time.time() if at is None else at
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def iso_seconds(iso: str) -> float:
    """Seconds since the epoch of a ``now_iso`` timestamp."""
    whole, _, fraction = iso.rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + float(f"0.{fraction or 0}")


@dataclass
class Volume:
    """A persistent volume claim mounted into every replica (cluster backends)."""

    claim: str
    mount_path: str
    read_only: bool = False
    sub_path: str | None = None

    @classmethod
    def parse(cls, text: str) -> Volume:
        """Parse ``CLAIM:PATH[:ro]`` as written on the command line."""
        parts = text.split(":")
        if len(parts) not in (2, 3) or not parts[0] or not parts[1].startswith("/"):
            raise InvalidSpecError(f"--pvc {text!r}: write CLAIM:/mount/path or CLAIM:/mount/path:ro")
        if len(parts) == 3 and parts[2] not in ("ro", "rw"):
            raise InvalidSpecError(f"--pvc {text!r}: the third part must be 'ro' or 'rw'")
        return cls(claim=parts[0], mount_path=parts[1], read_only=parts[2:] == ["ro"])


# ``--resume JOB_ID[:STEP|latest]``: which job's checkpoint a new job starts from. The checkpoint
# part is a step, ``latest`` (the newest complete one) or a checkpoint's id (``c`` and 12 hex
# digits, from the list). Matched whole (fullmatch), so a trailing newline is refused.
_RESUME = re.compile(r"(?P<job>[a-z0-9]([-a-z0-9]*[a-z0-9])?)(:(?P<which>latest|\d{1,18}|c[0-9a-f]{12}))?")
LATEST = "latest"


def parse_resume(text: str) -> tuple[str, str]:
    """``JOB_ID[:STEP|latest|CHECKPOINT_ID]`` as (job id, which): ``which`` is ``latest`` when not given."""
    m = _RESUME.fullmatch(text) if isinstance(text, str) else None
    if m is None or len(m.group("job")) > 63:
        raise InvalidSpecError(
            f"--resume {text!r}: write JOB_ID, JOB_ID:STEP or JOB_ID:latest (e.g. mnist-k3x9q:1200)"
        )
    return m.group("job"), m.group("which") or LATEST


@dataclass
class ResumedFrom:
    """The checkpoint a job started from (``--resume``, ``POST jobs/<id>/resume``), resolved at
    submit: its job (and that job's directory, where its run's earlier points are), its id in the
    job's checkpoint list, step, kind and path (the ranks' ``DISTTRAIN_RESUME_FROM``)."""

    job: str
    checkpoint: str
    step: int | None
    kind: str
    path: str
    job_dir: str


OUT_LIMIT = 1024**3  # --out-limit's default: bytes of values per rank
DEBUG_TIMEOUT = 600  # --debug-timeout's default: seconds


def check_out(spec: JobSpec) -> None:
    """``--out``, ``--out-all``, ``--out-limit`` and ``--debug-timeout`` as a spec has them."""
    names = [*spec.out, *spec.out_all]
    bad = next(
        (n for n in names if not isinstance(n, str) or not n.isidentifier() or keyword.iskeyword(n)), None
    )
    if bad is not None:
        raise InvalidSpecError(f"--out {bad!r} is not a variable name")
    twice = next((n for n in spec.out_all if n in spec.out), None)
    if twice is not None:
        raise InvalidSpecError(
            f"{twice} is in --out and --out-all: name it in one (--out-all: from every rank)"
        )
    for flag, value in (("--out-limit", spec.out_limit), ("--debug-timeout", spec.debug_timeout)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidSpecError(f"{flag} must be a whole number of at least 1, not {value!r}")


@dataclass
class JobSpec:
    """Everything needed to run one distributed training job.

    ``nproc_per_node`` is what ``--gpus`` sets: one process per GPU where there are GPUs,
    that many CPU processes (gloo) where there are none. Backend-specific knobs (Kubernetes
    flavour, namespace, tolerations...) live in ``options`` so the common spec stays small.
    """

    name: str = DEFAULT_NAME
    nodes: int = 1
    nproc_per_node: int = 1
    backend: str = "local"
    accelerator: str = ACCELERATORS[0]  # auto: GPUs where there are (backends/local/devices.py)
    cpu: str | None = None
    memory: str | None = None
    image: str | None = None
    volumes: list[Volume] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    working_dir: str | None = None
    max_restarts: int = 0
    launcher: str = DEFAULT_LAUNCHER
    args: list[str] = field(default_factory=list)
    entrypoint: str = SCRIPT_NAME
    options: dict[str, Any] = field(default_factory=dict)
    launcher_options: dict[str, Any] = field(default_factory=dict)  # the launcher's own flags
    # The job's hyper-parameters, name to scalar (hparams.py: captured at submit from the
    # notebook and the script's arguments); every rank gets them in $DISTTRAIN_HPARAMS.
    hparams: dict[str, Any] = field(default_factory=dict)
    # Checkpoints (README "Checkpoints"): keep the newest N complete ones of the job's checkpoint
    # dir (0: all); start from another job's checkpoint (``JOB_ID[:STEP|latest]``), resolved at
    # submit into ``resumed_from``, which the job layer alone sets.
    keep_checkpoints: int = 0
    resume: str | None = None
    resumed_from: ResumedFrom | None = None
    # Back into the kernel (docs/notebook.md, "Values back in the kernel", "Debugging a rank"): the variables
    # rank 0 (``out``) and every rank (``out_all``) leave, at most ``out_limit`` bytes per rank;
    # ``pdb``: a post-mortem prompt on the first rank to fail; ``debug_timeout``: how long a
    # rank's prompt waits for an answer before it goes on.
    out: list[str] = field(default_factory=list)
    out_all: list[str] = field(default_factory=list)
    out_limit: int = OUT_LIMIT
    pdb: bool = False
    debug_timeout: int = DEBUG_TIMEOUT

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc_per_node

    def validate(self) -> JobSpec:
        """Raise ``InvalidSpecError`` naming the first bad field; return self when all is well."""
        validate_name(self.name)
        for flag, value in (("--nodes", self.nodes), ("--gpus", self.nproc_per_node)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidSpecError(f"{flag} must be a whole number of at least 1, not {value!r}")
        if not isinstance(self.max_restarts, int) or self.max_restarts < 0:
            raise InvalidSpecError(f"--max-restarts must be 0 or more, not {self.max_restarts!r}")
        if self.accelerator not in ACCELERATORS:
            raise InvalidSpecError(f"accelerator must be auto, gpu or cpu, not {self.accelerator!r}")
        if self.launcher not in LAUNCHERS:
            raise InvalidSpecError(
                f"unknown launcher {self.launcher!r}; choose one of: {', '.join(LAUNCHERS)}"
            )
        for key in self.env:
            validate_env_name(key)
        validate_entrypoint(self.entrypoint)
        check_hparams(self.hparams)
        if isinstance(self.keep_checkpoints, bool) or not isinstance(self.keep_checkpoints, int):
            keep = self.keep_checkpoints
            raise InvalidSpecError(f"--keep-checkpoints must be a whole number, not {keep!r}")
        if self.keep_checkpoints < 0:
            raise InvalidSpecError("--keep-checkpoints must be 0 (keep all) or more")
        if self.resume is not None:
            parse_resume(self.resume)
        check_out(self)
        return self

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobSpec:
        data = dict(data)
        data["volumes"] = [Volume(**v) for v in data.get("volumes", [])]
        if isinstance(data.get("resumed_from"), dict):
            data["resumed_from"] = ResumedFrom(**_known_fields(ResumedFrom, data["resumed_from"]))
        return cls(**_known_fields(cls, data))


@dataclass
class ReplicaStatus:
    """One replica: a rank on the local backend, a pod on Kubernetes."""

    name: str
    role: str = "worker"
    index: int = 0
    phase: JobPhase = JobPhase.PENDING
    restarts: int = 0
    exit_code: int | None = None
    reason: str | None = None  # verbatim: "OOMKilled", "ImagePullBackOff", "Error"...
    message: str | None = None
    node: str | None = None
    start_time: str | None = None
    finish_time: str | None = None
    ready: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReplicaStatus:
        data = dict(data)
        data["phase"] = JobPhase(data.get("phase", "Pending"))
        return cls(**_known_fields(cls, data))


@dataclass
class Condition:
    """A condition of the job as its backend reports it (Kubernetes: the workload's conditions)."""

    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None


@dataclass
class Event:
    """Something that happened to a job or one of its replicas (Kubernetes events, launcher notes)."""

    time: str
    type: str  # "Normal" | "Warning"
    reason: str
    message: str
    object: str | None = None
    count: int = 1


@dataclass
class JobStatus:
    """Where a job stands. ``status.json`` in the job dir holds the latest one."""

    job_id: str
    phase: JobPhase = JobPhase.PENDING
    replicas: list[ReplicaStatus] = field(default_factory=list)
    reason: str | None = None
    message: str | None = None
    created: str | None = None
    start_time: str | None = None
    finish_time: str | None = None
    exit_code: int | None = None
    conditions: list[Condition] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    updated: str | None = None

    @property
    def is_terminal(self) -> bool:
        return self.phase.is_terminal

    @property
    def replicas_ready(self) -> int:
        return sum(1 for r in self.replicas if r.ready or r.phase is JobPhase.RUNNING)

    def end(
        self, phase: JobPhase, reason: str | None, message: str | None, at: str | None = None
    ) -> JobStatus:
        """Record the job's end: ``phase`` (a terminal one), why, and when (``at``, else now)."""
        if not phase.is_terminal:
            raise ValueError(f"{phase} is not an end")
        self.phase, self.reason, self.message = phase, reason, message
        self.finish_time = at or now_iso()
        return self

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobStatus:
        data = dict(data)
        data["phase"] = JobPhase(data.get("phase", "Pending"))
        data["replicas"] = [ReplicaStatus.from_dict(r) for r in data.get("replicas", [])]
        data["conditions"] = [Condition(**_known_fields(Condition, c)) for c in data.get("conditions", [])]
        data["events"] = [Event(**_known_fields(Event, e)) for e in data.get("events", [])]
        return cls(**_known_fields(cls, data))


@dataclass
class LogLine:
    """One line of job output.

    ``offset`` is the resume token *after* this line: pass it back as ``offset=`` to continue
    exactly where this line ended (a byte offset for one replica; one per replica, as
    ``name:offset,...``, when several are interleaved).
    """

    text: str
    replica: str
    offset: str
    rank: int | None = None


@dataclass
class LogRun:
    """Consecutive lines of one replica and rank, as a bulk reader hands them out.

    Reading in runs spares a follower one object and one resume token per line; ``offset``
    is the resume token after the run's last line.
    """

    replica: str
    rank: int | None
    lines: list[str]
    offset: str

    def to_dict(self) -> dict[str, Any]:
        return {"replica": self.replica, "rank": self.rank, "lines": self.lines, "offset": self.offset}


class LaunchRequest(Protocol):
    """A backend's typed launch request (``LocalRequest``, ``KubeRequest``): what a dry run shows
    and ``job.json`` keeps, as plain JSON. Every request says where the job runs (``device``)."""

    @property
    def device(self) -> str:
        """``"cuda"`` or ``"cpu"``."""

    def to_json(self) -> dict[str, Any]: ...


def request_device(request: dict[str, Any]) -> str | None:
    """``device`` of a launch request as ``job.json`` keeps it (the one field all requests share)."""
    device = request.get("device")
    return device if isinstance(device, str) else None


# Field metadata: the field stays in Python (what a front end in the same process reads) and is
# never part of the JSON, so the generated TypeScript leaves it out.
NOT_IN_JSON = "not_in_json"


@dataclass
class DryRun:
    """The exact request a backend would carry out, before anything runs.

    ``request`` is backend-native and typed: for the local backend the argv and env of each
    launcher process, for Kubernetes the manifests. ``text`` is how a person reads it (command
    lines or YAML).
    """

    job_id: str
    job_dir: str
    backend: str
    request: LaunchRequest
    text: str
    # The files the launcher puts beside the script (a DeepSpeed config...), by name: what the
    # magic lists. Not in ``to_json``: the REST answer is the request, which a submit carries out.
    side_files: dict[str, bytes] = field(default_factory=dict, repr=False, metadata={NOT_IN_JSON: True})

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "job_dir": self.job_dir,
            "backend": self.backend,
            "request": self.request.to_json(),
            "text": self.text,
        }


_T = TypeVar("_T")


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def _known_fields(cls: type[_T], data: dict[str, Any]) -> dict[str, Any]:
    """Drop keys a newer writer may have added, so old readers keep working."""
    names = _field_names(cls)  # type: ignore[arg-type]
    return {k: v for k, v in data.items() if k in names}


# Field metadata: the field is left out of the JSON (not null) when None, e.g. GPU measures
# where there is no GPU; the generated TypeScript makes it optional (``name?: T``).
ABSENT_WHEN_NONE = "absent_when_none"


def to_plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: to_plain(value)
            for f in dataclasses.fields(obj)
            if (value := getattr(obj, f.name)) is not None or not f.metadata.get(ABSENT_WHEN_NONE)
        }
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return obj
