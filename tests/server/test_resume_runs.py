"""Killed and resumed for real: 2 CPU ranks (gloo) train a small DDP model with em logging the loss
each step and a checkpoint every 3 steps (a torch.save file, or a DCP directory); a rank is
SIGKILLed after step 7; POST jobs/<id>/resume {"checkpoint": "latest"} through a real Jupyter
server starts it again from step 6. The resumed job's ranks got DISTTRAIN_RESUME_FROM = that
checkpoint, its first logged step is 7, and its final weights equal an uninterrupted run's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.storage.store import JobStore

from .conftest import CHECKOUT, poll, run_checkout_job

torch = pytest.importorskip("torch")

STEPS, EVERY, KILL_AFTER = 10, 3, 7

SCRIPT = """
import os, signal
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from jupyter_disttrain import em

FORMAT, STEPS, EVERY = {fmt!r}, {steps}, {every}
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Linear(4, 1)
ddp = DDP(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ckpts = os.environ["DISTTRAIN_CHECKPOINT_DIR"]
resume = os.environ.get("DISTTRAIN_RESUME_FROM")
start = 0
if resume and FORMAT == "torch":
    state = torch.load(resume, weights_only=False)
    model.load_state_dict(state["model"])
    start = state["step"]
elif resume:
    import torch.distributed.checkpoint as dcp
    state = {{"model": model.state_dict()}}
    dcp.load(state, checkpoint_id=resume)
    model.load_state_dict(state["model"])
    start = int(os.path.basename(resume).removeprefix("step_"))
if rank == 0:
    with open(os.path.join(os.environ["DISTTRAIN_JOB_DIR"], "resumed_from.txt"), "w") as f:
        f.write(resume or "")
g = torch.Generator().manual_seed(1)
data = [(torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)) for _ in range(STEPS)]
run = em.create_run("train")
for step in range(start + 1, STEPS + 1):
    x, y = data[step - 1]
    loss = nn.functional.mse_loss(ddp(x[rank::2]), y[rank::2])
    opt.zero_grad()
    loss.backward()
    opt.step()
    run.log("train", {{"loss": loss.item()}}, step=step)
    if step % EVERY == 0:
        os.makedirs(ckpts, exist_ok=True)
        if FORMAT == "torch":
            if rank == 0:
                path = os.path.join(ckpts, f"step_{{step}}.pt")
                torch.save({{"model": model.state_dict(), "step": step}}, path)
        else:
            import torch.distributed.checkpoint as dcp
            dcp.save({{"model": model.state_dict()}}, checkpoint_id=os.path.join(ckpts, f"step_{{step}}"))
        dist.barrier()
    if step == int(os.environ.get("KILL_AFTER", "0")) and not resume and rank == 1:
        run._flush()
        os.kill(os.getpid(), signal.SIGKILL)
if rank == 0:
    torch.save(model.state_dict(), os.path.join(os.environ["DISTTRAIN_JOB_DIR"], "final.pt"))
run.finish()
dist.destroy_process_group()
"""


@pytest.fixture
def job_root(shared_root: Path) -> Path:
    return shared_root


def killed_job(root: Path, script: str, name: str) -> str:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", CHECKOUT)
        job = api.submit(
            script,
            store=JobStore(root),
            name=name,
            gpus=2,
            accelerator="cpu",
            env={"KILL_AFTER": str(KILL_AFTER)},
        )
    status = job.wait(timeout=300)
    assert status.phase.value == "Failed", status
    return job.id


def first_step(root: Path, job_id: str) -> int:
    lines = (JobStore(root).job_dir(job_id) / "runs" / "train" / "metrics.jsonl").read_text().splitlines()
    return int(json.loads(lines[0])["step"])


@pytest.mark.parametrize("fmt", ["torch", "dcp"])
async def test_killed_then_resumed_from_latest_over_rest(jp_fetch: Any, shared_root: Path, fmt: str) -> None:
    script = SCRIPT.format(fmt=fmt, steps=STEPS, every=EVERY)
    whole = run_checkout_job(shared_root, script, f"whole-{fmt}")
    killed = killed_job(shared_root, script, f"killed-{fmt}")
    store = JobStore(shared_root)

    async def latest_is_step_6() -> Any:
        response = await jp_fetch("disttrain", "api", "jobs", killed, "checkpoints")
        listing = json.loads(response.body)
        done = [c for c in listing["checkpoints"] if c["complete"]]
        return done[-1] if done and done[-1]["step"] == 6 else None

    checkpoint = await poll(latest_is_step_6, "step 6's checkpoint to settle")
    assert checkpoint["kind"] == fmt
    response = await jp_fetch(
        "disttrain", "api", "jobs", killed, "resume", method="POST", body=json.dumps({"checkpoint": "latest"})
    )
    answer = json.loads(response.body)
    assert answer["checkpoint"]["id"] == checkpoint["id"]
    resumed = api.Job(answer["id"], store)
    status = resumed.wait(timeout=300)
    assert status.phase.value == "Succeeded", [ln.text for ln in resumed.logs()][-20:]

    assert (resumed.dir / "resumed_from.txt").read_text() == checkpoint["path"]
    assert first_step(shared_root, answer["id"]) == checkpoint["step"] + 1 == 7
    assert first_step(shared_root, killed) == 1
    expected = torch.load(store.job_dir(whole) / "final.pt")
    got = torch.load(resumed.dir / "final.pt")
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected)
