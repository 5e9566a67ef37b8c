"""The diagnosis of a real two-rank gloo job on the test cluster: the same verdict as on this
machine, rank 1's socket read on its node through ``srun --overlap``."""

from __future__ import annotations

import time

import pytest

from jupyter_disttrain.storage.store import JobStore
from tests.test_diagnosis import LATE_SCRIPT, LATE_VERDICT, wait_for_output

from .cluster import SlurmCluster
from .conftest import submit

pytestmark = pytest.mark.slurm


def test_a_rank_late_to_all_reduce_5_is_named_on_slurm(store: JobStore, slurm_cluster: SlurmCluster) -> None:
    job = submit(store, LATE_SCRIPT, gpus=1, nodes=2, name="late")  # a rank on each node
    try:
        wait_for_output(job, "rank-0", "step 3")
        time.sleep(0.5)  # rank 0 enters all_reduce #5
        incident = job.diagnose()
        assert incident.verdict == LATE_VERDICT
        assert incident.seconds <= 5.0  # srun included
        assert {p.replica: p.state for p in incident.ranks} == {"rank-0": "waiting", "rank-1": "not joined"}
    finally:
        job.cancel()
