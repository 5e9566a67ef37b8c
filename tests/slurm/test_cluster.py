"""The test cluster itself: two nodes on this one machine (Debian builds slurmd so that several
may share a host), so the multi-node tests run real two-node jobs."""

from __future__ import annotations

import pytest

from .cluster import NODES, SlurmCluster

pytestmark = pytest.mark.slurm


def test_a_two_node_step_runs_one_task_on_each_node(slurm_cluster: SlurmCluster) -> None:
    out = slurm_cluster.run("srun", "--nodes=2", "--ntasks-per-node=1", "printenv", "SLURMD_NODENAME")
    assert sorted(out.stdout.split()) == sorted(NODES)
