"""The issue's story end to end: a real 2-rank DDP job trains an MNIST-style model on synthetic data
with ``em`` (no rank guards, the job's hparams captured at submit); the REST routes return the
hparams, every logged point once and the checkpoint byte for byte; the job's TensorBoard serves the
scalars and its HParams dashboard lists the run, and the all-jobs TensorBoard has the run under the
name the runs table gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.storage.store import JobStore

from .conftest import poll, run_checkout_job

HPARAMS = {"lr": 0.05, "batch": 16, "epochs": 2, "hidden": 32}
STEPS = 8  # per epoch and rank: 2 ranks x 8 steps x 16 = 256 samples

SCRIPT = f"""
import os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from jupyter_disttrain import em

dist.init_process_group("gloo")
rank = dist.get_rank()
hp = {HPARAMS!r}
torch.manual_seed(0)
images = torch.randn(2 * {STEPS} * hp["batch"], 1, 28, 28)
labels = (images.mean(dim=(1, 2, 3)) > 0).long() + 2 * (images[:, 0, 0, 0] > 0).long()
train = TensorDataset(images, labels)
sampler = DistributedSampler(train, shuffle=True)
loader = DataLoader(train, batch_size=hp["batch"], sampler=sampler)
val_x, val_y = images[:64], labels[:64]
net = torch.nn.Sequential(
    torch.nn.Flatten(), torch.nn.Linear(784, hp["hidden"]), torch.nn.ReLU(), torch.nn.Linear(hp["hidden"], 10)
)
model = torch.nn.parallel.DistributedDataParallel(net)
opt = torch.optim.SGD(model.parameters(), lr=hp["lr"])
run = em.create_run("mnist", total_steps=hp["epochs"] * {STEPS} - 1)  # hparams: the job's
step = 0
for epoch in range(hp["epochs"]):
    sampler.set_epoch(epoch)
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        run.log("train", {{"loss": loss}}, step=step, epoch=epoch)
        step += 1
    with torch.no_grad():
        out = model.module(val_x)
        val_loss = torch.nn.functional.cross_entropy(out, val_y)
        acc = (out.argmax(1) == val_y).float().mean()
        run.log("val", {{"loss": val_loss, "acc": acc}}, step=step - 1, epoch=epoch)
path = os.path.join(os.environ["DISTTRAIN_JOB_DIR"], "model.pt")
if rank == 0:
    torch.save(model.module.state_dict(), path)
ckpt = em.create_artifact("checkpoint")
ckpt.add_file(path)  # on rank 1 it does nothing: the file is rank 0's
run.mark_output(ckpt)
run.finish()
dist.destroy_process_group()
"""
TRAIN_POINTS = 2 * STEPS  # rank 0's steps: each rank logs its own loss, rank 0 records


@pytest.fixture
def job_root(shared_root: Path) -> Path:
    return shared_root


@pytest.fixture(scope="module")
def mnist_job(shared_root: Path) -> str:
    return run_checkout_job(shared_root, SCRIPT, "mnist", hparams=HPARAMS)


async def get_json(jp_fetch: Any, *parts: str, **kwargs: Any) -> Any:
    return json.loads((await jp_fetch("disttrain", *parts, request_timeout=60, **kwargs)).body)


async def hparams_plugin(jp_fetch: Any, job_id: str, route: str, request: dict[str, Any]) -> Any:
    """An HParams plugin route of the job's TensorBoard (GET, the request as JSON in ``request``)."""
    parts = ("tensorboard", job_id, "data", "plugin", "hparams", route)
    return await get_json(jp_fetch, *parts, params={"request": json.dumps(request)})


async def test_rest_routes_return_the_hparams_every_point_once_and_the_artifact(
    jp_fetch: Any, mnist_job: str, shared_root: Path
) -> None:
    (row,) = (await get_json(jp_fetch, "api", "runs", params={"job": mnist_job}))["runs"]
    assert row["run"] == "mnist" and row["status"] == "finished" and row["hparams"] == HPARAMS
    assert set(row["metrics"]) == {"train/loss", "val/loss", "val/acc"}
    assert (row["step"], row["total_steps"], row["artifacts"]) == (TRAIN_POINTS - 1, TRAIN_POINTS - 1, 1)

    points: list[dict[str, Any]] = []
    since = 0
    while True:
        page = await get_json(
            jp_fetch, "api", "jobs", mnist_job, "runs", "mnist", params={"since": since, "limit": 5}
        )
        points += page["points"]
        since = page["next"]
        if not page["more"]:
            break
    keys = [(p["type"], p["name"], p["step"]) for p in points]
    assert len(keys) == len(set(keys)) == TRAIN_POINTS + 2 * 2
    assert [p["step"] for p in points if p["type"] == "train"] == list(range(TRAIN_POINTS))
    assert [p["epoch"] for p in points if p["name"] == "acc"] == [0, 1]
    assert row["metrics"]["train/loss"] == points[-3]["value"]  # the last train point

    (artifact,) = page["artifacts"]
    assert artifact["path"] == "checkpoint/model.pt"
    response = await jp_fetch(
        "disttrain", "api", "jobs", mnist_job, "runs", "mnist", "artifacts", "checkpoint", "model.pt"
    )
    original = (JobStore(shared_root).job_dir(mnist_job) / "model.pt").read_bytes()
    assert response.body == original and len(original) == artifact["size"] > 0


async def test_tensorboard_serves_the_scalars_and_the_hparams_dashboard_lists_the_run(
    jp_fetch: Any, mnist_job: str
) -> None:
    await jp_fetch("disttrain", "api", "tensorboard", mnist_job, method="POST", body="", request_timeout=90)

    async def tags() -> Any:
        found = (await get_json(jp_fetch, "tensorboard", mnist_job, "data", "plugin", "scalars", "tags")).get(
            "mnist", {}
        )
        return found if {"train/loss", "val/loss", "val/acc"} <= set(found) else None

    await poll(tags, "the run's scalars in TensorBoard")
    scalars = await get_json(
        jp_fetch,
        "tensorboard",
        mnist_job,
        "data",
        "plugin",
        "scalars",
        "scalars",
        params={"run": "mnist", "tag": "train/loss"},
    )
    assert [p[1] for p in scalars] == list(range(TRAIN_POINTS))

    experiment = await hparams_plugin(jp_fetch, mnist_job, "experiment", {"experimentName": ""})
    assert {h["name"] for h in experiment["hparamInfos"]} == set(HPARAMS)
    assert {m["name"]["tag"] for m in experiment["metricInfos"]} == {"train/loss", "val/loss", "val/acc"}
    statuses = ["STATUS_SUCCESS", "STATUS_UNKNOWN"]
    request = {"startIndex": 0, "sliceSize": 10, "allowedStatuses": statuses, "colParams": []}
    groups = await hparams_plugin(jp_fetch, mnist_job, "session_groups", request)
    sessions = [s["name"] for g in groups["sessionGroups"] for s in g["sessions"]]
    assert sessions == ["mnist"]
    assert groups["sessionGroups"][0]["hparams"]["lr"] == HPARAMS["lr"]


async def test_the_all_jobs_tensorboard_has_the_run_under_its_tensorboard_run(
    jp_fetch: Any, mnist_job: str
) -> None:
    (row,) = (await get_json(jp_fetch, "api", "runs", params={"job": mnist_job}))["runs"]
    await jp_fetch("disttrain", "api", "tensorboard", "_all", method="POST", body="", request_timeout=90)

    async def listed() -> Any:
        return row["tensorboard_run"] in await get_json(jp_fetch, "tensorboard", "_all", "data", "runs")

    await poll(listed, "the run in the all-jobs TensorBoard")
