"""Warm pools (docs/warm-start.md "Warm on the cluster"), a part of every backend: capacity kept
between jobs so that a re-run starts at once, listed and given back. None by default; a backend
that keeps some sets ``keeps_pools`` and overrides both (Slurm: its keepers' warm steps and kept
batch jobs; Kubernetes: its kept pods).
``jobs/pools.py`` asks every such backend."""

from __future__ import annotations

from typing import ClassVar

from ..model.errors import UnknownPoolError
from ..payloads.pools import Pool, PoolList, ReleaseAnswer


class PoolAccess:
    #: Whether it can keep capacity warm between jobs: only those backends are asked for pools.
    keeps_pools: ClassVar[bool] = False
    name: ClassVar[str]

    def pools(self) -> list[Pool]:
        """The pools this backend keeps now."""
        return []

    def pool_list(self) -> PoolList:
        """The pools, and a note (``errors``) for each part of the backend's capacity that could
        not be asked: the listing goes on without it (Kubernetes: a namespace RBAC hides)."""
        return PoolList(self.pools(), [])

    def release(self, pool: Pool, force: bool = False) -> ReleaseAnswer:
        """Give ``pool`` (one of ``pools()``) back now; one running a job only when ``force``
        (PoolBusyError otherwise, naming the job; forced, the job fails)."""
        raise UnknownPoolError(f"the {self.name} backend keeps no pools")
