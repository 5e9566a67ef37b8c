"""What the backends' tests of issue 37 share: a job whose rank 1 stops in ``breakpoint()`` and
keeps values for ``--out``, followed to its end with its prompts answered, and its values checked."""

from __future__ import annotations

import torch

from jupyter_disttrain.api import Job
from jupyter_disttrain.jobs.debug import Prompts, exchange
from jupyter_disttrain.model.specs import JobStatus
from jupyter_disttrain.payloads.jobs import DebugAnswer

# Rank 1 stops with x = 41; ``Net`` is what the notebook has of the class the script defines.
PROMPT_SCRIPT = """\
import torch, torch.distributed as dist
from torch import nn

class Net(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(2, width)

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(Net(3))
x = 40 + rank
if rank == 1:
    breakpoint()
losses = [float(model.module.fc(torch.ones(1, 2)).sum())]
dist.all_reduce(torch.ones(1))
dist.destroy_process_group()
"""


class Net(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(2, width)


def follow_answering(job: Job, commands: tuple[str | None, ...]) -> tuple[JobStatus, list[DebugAnswer]]:
    """Follow ``job`` to its end, answering each prompt a rank opens with ``commands`` in turn
    (None: only look); its end and pdb's answers."""
    prompts, said = Prompts(), []
    for page in job.follow():
        for prompt in prompts.feed(page.lines())[0]:
            said += [exchange(job.manager, job.id, prompt.replica, line) for line in commands]
    return page.status, said


def check_values_back(job: Job) -> None:
    """``PROMPT_SCRIPT``'s ``--out model,losses --out-all rank``: rank 0's model as it was."""
    values = job.result(namespace={"Net": Net})
    assert values.notes == [] and type(values["model"]) is Net and values["rank"] == [0, 1]
    torch.manual_seed(0)
    assert torch.equal(values["model"].fc.weight, Net(3).fc.weight) and len(values["losses"]) == 1
