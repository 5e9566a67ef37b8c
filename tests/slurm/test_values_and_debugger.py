"""A Slurm job on two nodes brings its ``--out`` values back through the shared job dir, and its
rank 1 stops in ``breakpoint()``: the prompt is answered from here, through an ``srun`` step on
the rank's node (the test cluster's nodes are not this machine by name), and the job goes on."""

from __future__ import annotations

import pytest

from jupyter_disttrain.backends.slurm.onnode import node_of
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore
from tests.prompt_helpers import PROMPT_SCRIPT, check_values_back, follow_answering

from .cluster import SlurmCluster
from .conftest import submit, wait_phase

pytestmark = pytest.mark.slurm


def test_values_come_back_and_a_ranks_prompt_is_answered_on_its_node(
    store: JobStore, slurm_cluster: SlurmCluster
) -> None:
    job = submit(
        store, PROMPT_SCRIPT, gpus=1, nodes=2, name="notebook", out=["model", "losses"], out_all=["rank"]
    )
    try:
        status, said = follow_answering(job, (None, "p x", "c"))
        assert status.phase is JobPhase.SUCCEEDED, status.message
        assert said[0].open and said[1].output == "41\n(Pdb) " and not said[2].open
        node = node_of(store.job_dir(job.id), "rank-1")
        assert node is not None and node["slurm_node"] == "dt2"  # not this machine: an srun step
        check_values_back(job)
        assert {(v.name, v.rank) for v in job.values()} == {
            ("model", 0),
            ("losses", 0),
            ("rank", 0),
            ("rank", 1),
        }
    finally:
        if not job.status().is_terminal:
            job.cancel()
            wait_phase(job, {JobPhase.CANCELLED})
