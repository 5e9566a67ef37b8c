"""What watching a running job finds: its ranks' resource samples and stacks, its diagnoses and
incidents, its guard's word, and what it held and used (resource-hours)."""

from __future__ import annotations

from dataclasses import dataclass

from . import absent


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
