"""DeepSpeed from a cell in a real kernel: a CIFAR-style ZeRO-2 job on 2 CPU ranks (gloo) under
torchrun, its config shipped from a JSON file next to the notebook, a checkpoint saved; and the
status while DeepSpeed compiles its ops (torch's own build lock, in the per-user cache)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.backends.rankenv import user_cache_dir
from jupyter_disttrain.jobs.manager import manager_for
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore
from tests.notebook_helpers import run_cells

pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (the test extra installs it)")

DS_CONFIG = {
    "train_batch_size": 16,
    "zero_optimization": {"stage": 2},
    "zero_allow_untested_optimizer": True,  # a plain torch.optim optimizer: no fused-op build
    "steps_per_print": 1,
}
SETUP = """
import argparse, os
import torch
from torch import nn
import deepspeed

class Net(nn.Module):  # the CIFAR-10 tutorial's shape, smaller
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.fc = nn.Linear(6 * 14 * 14, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1))
"""
TRAIN = (
    (
        "%%distrun --gpus 2 --accelerator cpu --name ds-cifar --out engine"
        " -- --deepspeed --deepspeed_config ds.json\n"
    )
    + """parser = argparse.ArgumentParser()
parser = deepspeed.add_config_arguments(parser)
args = parser.parse_args()
torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(96, 3, 32, 32), torch.randint(0, 10, (96,)))
net = Net()
optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
engine, optimizer, loader, _ = deepspeed.initialize(
    args=args, model=net, optimizer=optimizer, training_data=data
)
for step, (x, y) in enumerate(loader):
    loss = nn.functional.cross_entropy(engine(x), y)
    engine.backward(loss)
    engine.step()
    if step == 2:
        break
engine.save_checkpoint(os.path.join(os.environ["DISTTRAIN_JOB_DIR"], "ckpt"))
print(f"rank {engine.global_rank} saved at step {engine.global_steps}")
"""
)


@pytest.mark.timeout(1200)  # the first DeepSpeed job on a machine compiles its ops
def test_a_deepspeed_zero2_cell_trains_and_checkpoints_on_two_cpu_ranks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "jobs"
    monkeypatch.setenv("DISTTRAIN_JOB_ROOT", str(root))  # the kernel inherits it
    (tmp_path / "ds.json").write_text(json.dumps(DS_CONFIG))
    cells = [
        "%load_ext jupyter_disttrain",
        SETUP,
        TRAIN.replace("--name ds-cifar", "--name ds-dry --dry-run"),
        TRAIN,
        "print(type(engine).__name__, sorted(engine.state_dict()))",  # --out: the model, unwrapped
    ]
    # The first job on a machine compiles DeepSpeed's CPU collectives (minutes); later ones reuse them.
    dry, _, back = run_cells(cells, tmp_path, timeout=900)[2:]
    assert back.strip().splitlines()[-1] == "Net ['conv.bias', 'conv.weight', 'fc.bias', 'fc.weight']", back
    assert "# launcher deepspeed: the script calls deepspeed.initialize" in dry
    assert "MPLBACKEND=Agg" in dry and "TORCH_EXTENSIONS_DIR=" in dry
    shipped = len(json.dumps(DS_CONFIG))
    assert f"# side file: ds_config.json ({shipped} bytes, from the deepspeed launcher)" in dry
    store = JobStore(root)
    (record,) = store.records()
    job = api.get_job(record.id, store)
    status = job.status()
    tails = "\n".join(f"{ln.replica}: {ln.text}" for ln in job.logs(tail=15))
    assert status.phase is JobPhase.SUCCEEDED, f"{status.reason}: {status.message}\n{tails}"
    # Forked from the kernel's warm zygote, as any torchrun job: DeepSpeed's launcher adds only
    # what torch reads when it builds an op (TORCH_EXTENSIONS_DIR), never at import.
    assert "# start: warm: forked from a zygote" in dry
    started = [e.message for e in status.events if e.reason == "Started"]
    assert len(started) == 1 and "(warm: forked from the zygote" in started[0], started
    assert record.spec.launcher == "deepspeed"
    assert json.loads((job.dir / "ds_config.json").read_text()) == DS_CONFIG
    ckpt = job.dir / "ckpt"
    step = (ckpt / "latest").read_text().strip()
    assert step == "global_step3"
    shards = sorted(p.name for p in (ckpt / step).iterdir())
    assert shards == [
        "mp_rank_00_model_states.pt",
        "zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "zero_pp_rank_1_mp_rank_00_optim_states.pt",
    ]
    said = sorted(ln.text for ln in job.logs() if ln.text.startswith("rank "))
    assert said == ["rank 0 saved at step 3", "rank 1 saved at step 3"]
    # The ops DeepSpeed compiled stay in the user's cache: the next job loads them.
    ops = Path(user_cache_dir(), "torch_extensions", "deepspeed_shm_comm", "deepspeed_shm_comm.so")
    assert ops.is_file()
    detail = manager_for(store).detail(record.id)
    assert [(r.name, r.replicas) for r in detail.roles] == [("worker", 2)]
    assert detail.summary.launcher == "deepspeed"


# torch's JIT build takes this lock (FileBaton) for as long as it compiles an op.
COMPILING = """
import os, time
from torch.utils.file_baton import FileBaton
op = os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], "slow_op")
os.makedirs(op, exist_ok=True)
baton = FileBaton(os.path.join(op, "lock"))
if baton.try_acquire():
    print("building slow_op", flush=True)
time.sleep(120)
"""


def test_the_status_says_deepspeed_is_compiling_and_a_cancel_clears_the_build_lock(
    store: JobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("DISTTRAIN_CACHE_DIR", str(cache))
    job = api.submit(COMPILING, store=store, gpus=1, accelerator="cpu", launcher="deepspeed")
    deadline = time.monotonic() + 120
    while (status := job.status()).message != "compiling DeepSpeed ops (slow_op)":
        assert not status.is_terminal and time.monotonic() < deadline, status
        time.sleep(0.2)
    assert status.phase is JobPhase.RUNNING and status.reason == "Preparing"
    lock = cache / "torch_extensions" / "slow_op" / "lock"
    assert lock.exists()
    status = job.cancel()
    assert status.phase is JobPhase.CANCELLED
    assert not lock.exists()  # a later job would otherwise wait for this build forever
    assert [e.message for e in status.events if e.reason == "Abandoned"] == [
        "unfinished builds cleared: slow_op"
    ]
