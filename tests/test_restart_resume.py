"""``--max-restarts 1`` with a rank killed once after a checkpoint (2 gloo ranks, forked warm):
the restarted ranks get ``DISTTRAIN_RESUME_FROM`` = the newest checkpoint, the job Succeeds with
the weights of a run that was never killed, and the run shows each step once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.jobs.manager import manager_for
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore

HERE = str(Path(__file__).resolve().parents[1])

# A plain DDP loop that saves every 4 steps and starts from em.resume_from() when given one; with
# KILL set, rank 1 kills itself once at step 9, two steps after the step-7 checkpoint (a marker
# file in the job dir makes it once).
TRAIN = """
import os, signal
import torch
import torch.distributed as dist
from jupyter_disttrain import em

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
run = em.create_run("train")
start = 0
print("resume_from", em.resume_from(), flush=True)
if em.resume_from():
    state = torch.load(em.resume_from())
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"] + 1
x = torch.arange(64 * 8, dtype=torch.float32).reshape(64, 8) % 7 / 7
y = x.sum(1, keepdim=True)
job_dir = os.environ["DISTTRAIN_JOB_DIR"]
for step in range(start, 12):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    run.log("train", {"loss": loss.item()}, step=step)
    if step % 4 == 3 and rank == 0:
        torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step},
                   os.path.join(em.checkpoint_dir(), f"step-{step}.pt"))
    dist.barrier()
    marker = os.path.join(job_dir, "killed-once")
    if KILL and step == 9 and rank == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        run._flush()
        os.kill(os.getpid(), signal.SIGKILL)
if rank == 0:
    torch.save(model.module.state_dict(), os.path.join(job_dir, "final.pt"))
run.finish()
dist.destroy_process_group()
"""


@pytest.mark.timeout(600)
def test_a_restarted_group_resumes_from_the_newest_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    store = JobStore(tmp_path / "jobs")
    monkeypatch.setenv("PYTHONPATH", HERE)  # the ranks import this worktree's package
    killed = api.submit(f"KILL = True\n{TRAIN}", store=store, gpus=2, accelerator="cpu", max_restarts=1)
    whole = api.submit(f"KILL = False\n{TRAIN}", store=store, gpus=2, accelerator="cpu")
    for job in (killed, whole):
        status = job.wait(timeout=400)
        assert status.phase is JobPhase.SUCCEEDED, (status, [ln.text for ln in job.logs("rank-0")][-20:])
    status = killed.status()
    # Its group restarted warm: fresh ranks forked from the zygote, not a new torchrun's.
    assert "(warm: " in next(e.message for e in status.events if e.reason == "Started")
    assert [r.restarts for r in status.replicas if r.name.startswith("rank-")] == [1, 1]
    job_dir = store.job_dir(killed.id)
    newest = str(job_dir / "checkpoints" / "step-7.pt")
    for rank in ("rank-0", "rank-1"):
        said = [ln.text for ln in killed.logs(rank) if ln.text.startswith("resume_from")]
        assert said == ["resume_from None", f"resume_from {newest}"], said
    # The earlier attempt logged steps 8 and 9 before rank 1 died; the restart logged them again.
    raw = [
        json.loads(line)["step"] for line in (job_dir / "runs/train/metrics.jsonl").read_text().splitlines()
    ]
    assert raw.count(8) == 2 and raw.count(9) == 2, (raw, [ln.text for ln in killed.logs("rank-0")][-30:])
    detail = manager_for(store).run_detail(killed.id, "train")
    assert [p.step for p in detail.points] == list(range(12)) and detail.resumed_at == [7]
    assert detail.record["restarts"][0]["step"] == 7
    # Resumed from the checkpoint, the job ends with the weights of the run that was never killed.
    final, uninterrupted = (torch.load(store.job_dir(j.id) / "final.pt") for j in (killed, whole))
    assert all(torch.equal(final[k], uninterrupted[k]) for k in final)
    # The curve it shows is the uninterrupted one's, point for point.
    same = manager_for(store).run_detail(whole.id, "train")
    assert [(p.step, p.value) for p in detail.points] == [(p.step, p.value) for p in same.points]
