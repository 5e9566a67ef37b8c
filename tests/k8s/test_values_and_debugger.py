"""The notebook as the front end on Kubernetes (issue 37): a toy-cluster job with its job dir on
the PVC brings its ``--out`` values back, its rank 1's ``breakpoint()`` is answered through
``pods/exec`` in that rank's pod, and without a PVC ``--out`` is refused at the dry run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from jupyter_disttrain import api
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.debugging import Prompts, exchange
from jupyter_disttrain.errors import InvalidSpecError
from jupyter_disttrain.specs import JobPhase

from .conftest import ddp_spec
from .toycluster import ToyCluster

SCRIPT = """\
import torch, torch.distributed as dist
from torch import nn

class Net(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(2, width)

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = Net(3)
x = 40 + rank
if rank == 1:
    breakpoint()
dist.all_reduce(torch.ones(1))
dist.destroy_process_group()
"""


class Net(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(2, width)


def test_values_come_back_through_the_pvc_and_a_prompt_through_pods_exec(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    spec = ddp_spec(workspace, options={"flavor": "job"}, out=["model"], out_all=["rank"])
    job = api.Job(backend.submit(spec, SCRIPT), backend.store)
    try:
        prompts, said = Prompts(), []
        for page in job.follow():
            for prompt in prompts.feed(page.lines())[0]:
                for line in (None, "p x", "c"):
                    said.append(exchange(job.manager, job.id, prompt.replica, line))
        assert page.status.phase is JobPhase.SUCCEEDED, page.status.message
        assert [a.output.endswith("(Pdb) ") for a in said[:2]] == [True, True] and not said[2].open
        assert said[1].output == "41\n(Pdb) "
        values = job.result(namespace={"Net": Net})
        assert values.notes == [] and values["rank"] == [0, 1]
        torch.manual_seed(0)
        assert torch.equal(values["model"].fc.weight, Net(3).fc.weight)
    finally:
        if not job.status().is_terminal:
            job.cancel()


def test_out_without_the_job_dir_on_a_pvc_is_refused_at_the_dry_run(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    spec = ddp_spec(workspace, volumes=[], out=["model"])
    with pytest.raises(
        InvalidSpecError, match=r"^--out: the values come back through the job dir .* \(--pvc CLAIM"
    ):
        backend.dryrun(spec, script=SCRIPT)
    assert backend.store.ids() == []
