"""The slurm group's cluster: two nodes of a real Slurm on this machine, started once for the
session in a directory of its own (``cluster.py``), found by every client, kernel and server of
the tests through ``SLURM_CONF``, and stopped at the end.

Without Slurm (or root) the group is skipped with the reason, unless ``DISTTRAIN_REQUIRE_SLURM``
is set (``scripts/test.sh`` sets it after installing Slurm): then it fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from .cluster import SlurmCluster, missing


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    why = missing()
    if why:
        if os.environ.get("DISTTRAIN_REQUIRE_SLURM"):
            pytest.fail(f"no Slurm cluster can start: {why}")
        pytest.skip(f"no Slurm cluster can start: {why}")
    cluster = SlurmCluster()
    with pytest.MonkeyPatch.context() as mp:
        for key, value in cluster.env.items():
            mp.setenv(key, value)
        # A kernel started by a test must not think it runs inside an allocation of ours.
        for key in [k for k in os.environ if k.startswith(("SLURM_JOB_", "SLURM_NNODES", "SLURM_STEP_"))]:
            mp.delenv(key)
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.stop()
