"""The Slurm allocation a kernel runs in, from its environment alone (``salloc``, batchspawner).

Light on purpose: ``backends.default_backend_name`` asks it whenever a job names no backend.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ALLOCATION_ENV = "SLURM_JOB_ID"


@dataclass(frozen=True)
class Allocation:
    job: str
    nodes: int

    @classmethod
    def here(cls) -> Allocation | None:
        job = os.environ.get(ALLOCATION_ENV)
        if not job:
            return None
        nodes = os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or "1"
        return cls(job, int(nodes) if nodes.isdigit() else 1)


def default_here() -> bool:
    """Whether slurm is the default backend here: inside an allocation of more than one node
    with Slurm's commands on PATH (one node's jobs run as well beside the kernel, locally)."""
    allocation = Allocation.here()
    if allocation is None or allocation.nodes < 2:
        return False
    import shutil  # slow to import (its archive formats): only inside an allocation

    return shutil.which("srun") is not None
