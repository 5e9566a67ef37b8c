"""``em`` in a real 2-rank job (torchrun, gloo on CPU), called with no rank guards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore
from tests.em_helpers import metric_lines, run_record, tensorboard

HERE = str(Path(__file__).resolve().parents[1])

TRAIN = """
import os, time
import torch
import torch.distributed as dist
from jupyter_disttrain import em

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
run = em.create_run("mnist", hparams={"lr": 0.1, "batch": 64, "opt": "sgd"}, description="synthetic")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 8)
y = x.sum(1, keepdim=True)
for step in range(50):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    run.log("train", {"loss": loss.item()}, step=step, epoch=step // 10)
    if step % 10 == 9:
        run.log("val", {"acc": step / 50}, step=step, epoch=step // 10)
ckpt = os.path.join(os.environ["DISTTRAIN_JOB_DIR"], f"ckpt-{rank}.pt")
torch.save(model.module.state_dict(), ckpt)
art = em.create_artifact("model")
art.add_file(ckpt, name="model.pt")
run.mark_output(art)
dist.barrier()
if CRASH:
    if rank == 1:
        raise RuntimeError("on purpose")
    time.sleep(120)  # until torchrun stops this rank (SIGTERM) after rank 1 failed
run.finish()
dist.destroy_process_group()
"""


# The crashing job's TensorBoard follower takes longer to start than torchrun's 30 s between
# its SIGTERM and its SIGKILL to rank 0 (as on a busy machine): its events must still be whole.
SLOW_FOLLOWER = """
import sys, time
if sys.argv[0] == "-c" and len(sys.argv) == 3 and "/tensorboard/" in sys.argv[2]:
    time.sleep(35)
"""


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, api.Job]]:
    """Both jobs at once, shared by the tests: the one that ends and the one that crashes."""
    store = JobStore(tmp_path_factory.mktemp("em-jobs"))
    slow = tmp_path_factory.mktemp("slow-follower")
    (slow / "sitecustomize.py").write_text(SLOW_FOLLOWER)
    with pytest.MonkeyPatch.context() as mp:
        jobs = {}
        for crash in ("False", "True"):
            # The ranks import this worktree's package (the venv's editable install may be another).
            mp.setenv("PYTHONPATH", f"{slow}:{HERE}" if crash == "True" else HERE)
            script = f"CRASH = {crash}\n{TRAIN}"
            jobs[crash] = api.submit(script, gpus=2, accelerator="cpu", store=store, name=crash.lower())
        yield jobs


def test_a_two_rank_job_records_every_point_once_from_rank_0(jobs: dict[str, api.Job]) -> None:
    job = jobs["False"]
    status = job.wait(timeout=240)
    assert status.phase is JobPhase.SUCCEEDED, (status, [ln.text for ln in job.logs()][-20:])
    run_dir = job.dir / "runs" / "mnist"
    lines = metric_lines(run_dir / "metrics.jsonl")
    train = [p for p in lines if p["type"] == "train"]
    assert [p["step"] for p in train] == list(range(50))
    assert [(p["step"], p["value"]) for p in lines if p["type"] == "val"] == [
        (s, s / 50) for s in range(9, 50, 10)
    ]
    assert not any(p.get("step_backwards") for p in lines)

    record = run_record(run_dir)
    assert record["status"] == "finished" and record["hparams"] == {"lr": 0.1, "batch": 64, "opt": "sgd"}
    assert record["description"] == "synthetic" and record["outputs"] == ["model"]
    platform = record["platform"]
    assert (platform["world_size"], platform["recording_ranks"], platform["gpus"]) == (2, 1, 0)
    assert platform["torch"].startswith("2.") and platform["job_id"] == job.id
    assert record["final_metrics"]["train/loss"] == train[-1]["value"]

    copied = run_dir / "artifacts" / "model" / "model.pt"
    assert copied.read_bytes() == (job.dir / "ckpt-0.pt").read_bytes()
    assert sorted(p.name for p in (run_dir / "artifacts").iterdir()) == ["model"]

    scalars, hparams, metric_tags = tensorboard(job.dir / "tensorboard" / "mnist")
    assert [s for s, _ in scalars["train/loss"]] == list(range(50))
    assert [v for _, v in scalars["train/loss"]] == pytest.approx([p["value"] for p in train])
    assert hparams == {"lr": 0.1, "batch": 64.0, "opt": "sgd"}
    assert sorted(metric_tags) == ["train/loss", "val/acc"]
    assert [p.name for p in (job.dir / "tensorboard").iterdir()] == ["mnist"]


def test_a_job_that_crashes_before_finish_leaves_every_point_readable(jobs: dict[str, api.Job]) -> None:
    job = jobs["True"]
    status = job.wait(timeout=300)
    assert status.phase is JobPhase.FAILED, status
    run_dir = job.dir / "runs" / "mnist"
    lines = metric_lines(run_dir / "metrics.jsonl")
    assert [p["step"] for p in lines if p["type"] == "train"] == list(range(50))
    record = run_record(run_dir)
    assert record["status"] == "failed" and record["reason"] == "terminated (SIGTERM)"
    scalars, hparams, _ = tensorboard(job.dir / "tensorboard" / "mnist")
    assert len(scalars["train/loss"]) == 50 and hparams["lr"] == 0.1
