"""The test cluster itself: two nodes on this one machine (Debian builds slurmd so that several
may share a host), so the multi-node tests run real two-node jobs."""

from __future__ import annotations

import pytest

from jupyter_disttrain.backends.slurm.client import SlurmClient

from .cluster import NODES, SlurmCluster

pytestmark = pytest.mark.slurm


def test_a_two_node_step_runs_one_task_on_each_node(slurm_cluster: SlurmCluster) -> None:
    out = slurm_cluster.run("srun", "--nodes=2", "--ntasks-per-node=1", "printenv", "SLURMD_NODENAME")
    assert sorted(out.stdout.split()) == sorted(NODES)


def test_the_text_and_json_answers_of_this_slurm_agree(slurm_cluster: SlurmCluster) -> None:
    job = slurm_cluster.run("sbatch", "--parsable", "--output=/dev/null", "--wrap", "sleep 30").stdout.strip()
    client = SlurmClient()
    text = client.jobs([job, "999999"], fresh=True)
    client._json_only = True  # as after a text answer it could not read: squeue --json instead
    js = client.jobs([job, "999999"], fresh=True)
    assert set(text) == set(js) == {job}  # 22.05's --json lists every job: filtered by id
    assert (
        (text[job].state, text[job].partition)
        == (js[job].state, js[job].partition)
        == (
            text[job].state,
            "debug",
        )
    )
    assert client.jobs(["999999"], fresh=True) == {}  # unknown alone: Slurm says so, not an error
    assert client.accounting([job]) == {}  # no accounting here: nothing, never an error
    slurm_cluster.run("scancel", job)
