"""Warm pools: capacity a backend keeps between jobs so that a re-run starts at once (Slurm's warm
steps inside an allocation; docs/warm-start.md "Warm on the cluster"), as ``GET pools``,
``jupyter disttrain pools`` and ``%distrun pools`` show them and ``DELETE pools/<id>`` releases them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PoolNode:
    """One node (Slurm) or pod (Kubernetes) of a pool: where it is, what it holds, what runs in it.

    ``step`` is the Slurm step that holds the node (``JOB.STEP``); ``accelerators`` the GPUs that
    step holds (none for a step started without GPUs); ``jobs`` the ids of the jobs forked in it
    now."""

    node: int
    host: str
    step: str
    accelerators: list[str]
    jobs: list[str]


@dataclass
class Pool:
    """A pool: its id (``release`` takes it), its backend and where it lives (``place``: the
    allocation), the environment fingerprint it serves, its nodes, the accelerators they hold, the
    jobs running in it; ``idle_for`` (seconds, null while a job runs) and ``releases_in`` (seconds
    until it releases itself when no job comes; null while a job runs); ``namespace``: the
    Kubernetes namespace of its pods (null for other backends), where a release deletes it."""

    id: str
    backend: str
    place: str
    fingerprint: str
    nodes: list[PoolNode]
    accelerators: int
    jobs: list[str]
    idle_for: float | None
    releases_in: float | None
    namespace: str | None = None


@dataclass
class PoolList:
    """Every pool of every backend that keeps them; ``errors``: a backend that could not say
    (its name and why), so an empty list never hides one that failed."""

    pools: list[Pool]
    errors: list[str]


@dataclass
class ReleaseAnswer:
    """What ``DELETE pools/<id>`` did: ``released`` once the pool has ended (its nodes given back),
    false while it is still ending (``message`` says what is left)."""

    id: str
    released: bool
    message: str
