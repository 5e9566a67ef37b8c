"""A cancel with a grace period reaches every rank as SIGTERM (through torchrun's agent, or the
warm agent), and ``em.on_preempt``'s callback saves one last checkpoint before the ranks stop."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore

pytestmark = pytest.mark.usefixtures("start_path")

HERE = str(Path(__file__).resolve().parents[1])

SCRIPT = """
import os, time
import torch
import torch.distributed as dist
from jupyter_disttrain import em

dist.init_process_group("gloo")
rank = dist.get_rank()
run = em.create_run("train", ranks="all")
step = 0
def last_checkpoint():
    path = os.path.join(em.checkpoint_dir(), f"preempted-rank{rank}-step{step}.pt")
    torch.save({"step": step}, path)
    run.checkpoint(path, step=step)
em.on_preempt(last_checkpoint)
dist.barrier()
while True:
    step += 1
    run.log("train", {"loss": 1.0 / step}, step=step)
    if step == 3:
        open(os.path.join(os.environ["DISTTRAIN_JOB_DIR"], f"running-{rank}"), "w").close()
    time.sleep(0.05)
"""


@pytest.mark.timeout(300)
def test_a_cancel_with_grace_lets_each_rank_save_a_last_checkpoint(
    store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", HERE)
    job = api.submit(SCRIPT, store=store, gpus=2, accelerator="cpu", options={"grace_period": 20.0})
    job_dir = store.job_dir(job.id)
    deadline = time.monotonic() + 180
    while not all((job_dir / f"running-{r}").exists() for r in (0, 1)):
        assert time.monotonic() < deadline and not job.status().phase.is_terminal, job.status()
        time.sleep(0.2)
    status = job.cancel()
    assert status.phase is JobPhase.CANCELLED, status
    declared = [
        json.loads(line) for line in (job_dir / "runs/train/checkpoints.jsonl").read_text().splitlines()
    ]
    assert sorted(Path(d["path"]).name.split("-")[1] for d in declared) == ["rank0", "rank1"]
    for entry in declared:
        assert Path(entry["path"]).parent == job_dir / "checkpoints" and Path(entry["path"]).is_file()
        assert entry["step"] >= 3
