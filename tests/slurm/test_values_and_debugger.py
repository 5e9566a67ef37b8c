"""A Slurm job on two nodes brings its ``--out`` values back through the shared job dir, and its
rank 1 stops in ``breakpoint()``: the prompt is answered from here, through an ``srun`` step on
the rank's node (the test cluster's nodes are not this machine by name), and the job goes on."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from jupyter_disttrain.backends.slurm.onnode import node_of
from jupyter_disttrain.debugging import Prompts, exchange
from jupyter_disttrain.specs import JobPhase
from jupyter_disttrain.store import JobStore

from .cluster import SlurmCluster
from .conftest import submit, wait_phase

pytestmark = pytest.mark.slurm

SCRIPT = """
import torch, torch.distributed as dist
from torch import nn

class Net(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(2, width)

    def forward(self, x):
        return self.fc(x)

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(Net(3))
x = 40 + rank
if rank == 1:
    breakpoint()
losses = [float(model(torch.ones(1, 2)).sum())]
dist.all_reduce(torch.ones(1))
dist.destroy_process_group()
"""


class Net(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(2, width)


def test_values_come_back_and_a_ranks_prompt_is_answered_on_its_node(
    store: JobStore, slurm_cluster: SlurmCluster
) -> None:
    job = submit(store, SCRIPT, gpus=1, nodes=2, name="notebook", out=["model", "losses"], out_all=["rank"])
    try:
        prompts, said = Prompts(), []
        for page in job.follow():
            for prompt in prompts.feed(page.lines())[0]:
                for line in (None, "p x", "c"):
                    said.append(exchange(job.manager, job.id, prompt.replica, line))
        assert page.status.phase is JobPhase.SUCCEEDED, page.status.message
        assert said[0].open and said[1].output == "41\n(Pdb) " and not said[2].open
        node = node_of(store.job_dir(job.id), "rank-1")
        assert node is not None and node["slurm_node"] == "dt2"  # not this machine: an srun step
        values = job.result(namespace={"Net": Net})
        assert values.notes == [] and type(values["model"]) is Net and values["rank"] == [0, 1]
        torch.manual_seed(0)
        assert torch.equal(values["model"].fc.weight, Net(3).fc.weight)  # rank 0's, as it was
        assert len(values["losses"]) == 1
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
