"""The launch env makes training libraries distributed on CPU, and a rank that trains alone is
reported in the job's events (real torchrun, 2 ranks, gloo, real Accelerate and Lightning loops)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.runtime.joined import lone_ranks
from jupyter_disttrain.storage.store import JobStore

# Every test on both paths of the local backend: warm (forked from the zygote) and cold.
pytestmark = pytest.mark.usefixtures("start_path")

ACCELERATE_LOOP = """
import torch
from accelerate import Accelerator

accelerator = Accelerator()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
loader = torch.utils.data.DataLoader(data, batch_size=2)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
batches = 0
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    batches += 1
print(f"num_processes={accelerator.num_processes} "
      f"type={accelerator.distributed_type.value} batches={batches}")
accelerator.end_training()
"""


def _each_rank_says(store: JobStore, script: str, word: str) -> dict[int | None, str]:
    """Run ``script`` as a 2-rank CPU job that succeeds and has no RanksNotJoined warning."""
    job = api.submit(script, store=store, gpus=2, accelerator="cpu")
    status = job.wait(timeout=240)
    if status.phase is not JobPhase.SUCCEEDED:  # say why, with each rank's last lines
        tails = "\n".join(f"{ln.rank}: {ln.text}" for ln in job.logs(tail=15))
        raise AssertionError(f"{status.phase.value}: {status.reason}: {status.message}\n{tails}")
    assert not [e for e in status.events if e.reason == "RanksNotJoined"]  # joined (then destroyed)
    return {ln.rank: ln.text for ln in job.logs() if ln.rank is not None and word in ln.text}


def test_accelerate_is_distributed_on_cpu_and_no_rank_is_reported_alone(store: JobStore) -> None:
    said = _each_rank_says(store, ACCELERATE_LOOP, "num_processes")
    # Each rank sees 2 processes and half of the 8 batches.
    assert said == {r: "num_processes=2 type=MULTI_CPU batches=4" for r in (0, 1)}


LIGHTNING_MODEL = """
import torch
import lightning as L


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.batches = 0

    def training_step(self, batch, batch_idx):
        self.batches += 1
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

"""
LIGHTNING_LOOP = (
    LIGHTNING_MODEL
    + """
data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False)
model = Model()
trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=2))
print(f"world_size={trainer.world_size} strategy={type(trainer.strategy).__name__} batches={model.batches}")
"""
)


def test_lightning_trainer_with_defaults_is_distributed_on_cpu(store: JobStore) -> None:
    # Without PL_TRAINER_DEVICES each rank says world_size=1 SingleDeviceStrategy batches=8.
    said = _each_rank_says(store, LIGHTNING_LOOP, "world_size")
    assert said == {r: "world_size=2 strategy=DDPStrategy batches=4" for r in (0, 1)}


NOT_JOINED = """
import os, tempfile
import torch.distributed as dist

if os.environ["RANK"] == "1":  # a group of its own, of 1
    dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
    dist.destroy_process_group()
print("trained alone")
"""


def test_ranks_that_never_join_the_jobs_process_group_are_warned_about(store: JobStore) -> None:
    job = api.submit(NOT_JOINED, store=store, gpus=2, name="alone")
    status = job.wait(timeout=120)
    if status.phase is not JobPhase.SUCCEEDED:  # say why, with each rank's last lines
        tails = "\n".join(f"{ln.rank}: {ln.text}" for ln in job.logs(tail=15))
        raise AssertionError(f"{status.phase.value}: {status.reason}: {status.message}\n{tails}")
    (event,) = [e for e in status.events if e.reason == "RanksNotJoined"]
    assert event.type == "Warning"
    assert (
        "rank-0 (world of 1), rank-1 (world of 1) never joined the job's process group of 2" in event.message
    )


def test_the_check_ignores_scripts_without_torch_distributed_failed_ranks_and_single_rank_jobs() -> None:
    done = {"exit_code": 0}
    assert lone_ranks(2, {0: {"joined_world": None, **done}, 1: {}}) is None
    assert lone_ranks(1, {0: {"joined_world": 1, **done}}) is None
    assert lone_ranks(2, {0: {"joined_world": 2, **done}, 1: {"joined_world": 2, **done}}) is None
    # A rank that failed (or is still running) before it could join is not "training alone".
    crashed: dict[int, dict[str, object]] = {0: {"joined_world": 1, "exit_code": 1}, 1: {"joined_world": 1}}
    assert lone_ranks(2, crashed) is None
    crashed[1]["exit_code"] = 0
    assert (lone_ranks(2, crashed) or "").startswith("rank-1 (world of 1) never joined")


# A warm rank: the zygote watched, then imported torch; the rank's script imports only json, then
# a package the zygote preloaded that holds torch (as lightning does).
WARM_RANK = """
import sys, types
from jupyter_disttrain.runtime import joined
joined.watch()
import torch
sys.modules["preloaded"] = types.ModuleType("preloaded")
sys.modules["preloaded.core"] = core = types.ModuleType("preloaded.core")
core.torch = torch
joined.watch()  # the rank wrapper's, in the fork
import json
print(joined.joined_world())
import preloaded
print(joined.joined_world())
"""


def test_a_warm_rank_has_imported_torch_once_it_imports_it_or_a_package_holding_it() -> None:
    out = subprocess.run([sys.executable, "-c", WARM_RANK], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["None", "1"]
