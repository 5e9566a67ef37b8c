"""Warm pools of every backend that keeps them (``Backend.keeps_pools``: Slurm's keepers and kept
batch jobs, Kubernetes' kept pods), listed and released: what ``%distrun pools``, ``jupyter
disttrain pools``, ``GET``/``DELETE pools`` and the lab's "Warm pools" section all call. Local
zygotes are no pool: they hold no accelerator and end by themselves (docs/warm-start.md)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..backends import backend_class, backend_names
from ..model.errors import UnknownPoolError
from ..payloads.pools import Pool, PoolList, ReleaseAnswer

if TYPE_CHECKING:
    from ..backends.base import Backend

log = logging.getLogger(__name__)


class JobPools:
    """The pools of the backends ``backend`` makes (the manager's: made once, kept)."""

    def __init__(self, backend: Callable[[str], Backend]) -> None:
        self.backend = backend

    def _keeping(self) -> list[str]:
        names = []
        for name in backend_names():
            try:
                if backend_class(name).keeps_pools:
                    names.append(name)
            except Exception as exc:  # a broken third-party backend: the others still answer
                log.warning("backend %r is left out of the pools: %s", name, exc)
        return names

    def list_pools(self) -> PoolList:
        """Every pool, by backend; a backend that could not answer is named in ``errors``."""
        pools: list[Pool] = []
        errors: list[str] = []
        for name in self._keeping():
            try:
                found = self.backend(name).pool_list()
            except Exception as exc:
                errors.append(f"{name}: {exc}")
                continue
            pools += found.pools
            errors += [f"{name}: {note}" for note in found.errors]
        return PoolList(pools, errors)

    def release(self, pool_id: str, force: bool = False) -> ReleaseAnswer:
        """Release the pool ``pool_id`` (an id of the listing); UnknownPoolError naming it if none has it."""
        for name in self._keeping():
            backend = self.backend(name)
            for pool in backend.pools():
                if pool.id == pool_id:
                    return backend.release(pool, force)
        raise UnknownPoolError(
            f"no warm pool {pool_id!r} (released, or ended when idle); the pool listing shows those there are"
        )
