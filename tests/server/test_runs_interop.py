"""MLflow and Lightning in a real job, with nothing configured: MLflow records into the job's SQLite
database, its runs show in the runs API and its metrics in the job's TensorBoard dir; Lightning's
default logger writes into the job's TensorBoard dir."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.backends.rankenv import rank_env
from jupyter_disttrain.model.specs import JobSpec
from jupyter_disttrain.storage.store import JobStore
from tests.em_helpers import tensorboard

from .conftest import run_checkout_job

SCRIPT = """
import mlflow
import torch
import lightning.pytorch as pl

with mlflow.start_run(run_name="mlf"):
    mlflow.log_param("lr", 0.1)
    for step in range(5):
        mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
    mlflow.log_metric("gap", float("nan"), step=4)


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32, 4)), batch_size=4)
trainer = pl.Trainer(
    max_steps=4, log_every_n_steps=1, accelerator="cpu", devices=1, enable_progress_bar=False,
    enable_model_summary=False, enable_checkpointing=False,
)
trainer.fit(Model(), data)
"""

# Two ranks, MLflow from rank 0 only (it is not rank-aware).
RANK0_SCRIPT = """
import os
import mlflow

if int(os.environ["RANK"]) == 0:
    with mlflow.start_run(run_name="tb"):
        for step in range(4):
            mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
        mlflow.log_metric("acc", 0.5, step=3)
"""


@pytest.fixture
def job_root(shared_root: Path) -> Path:
    return shared_root


@pytest.fixture(scope="module")
def interop_job(shared_root: Path) -> str:
    pytest.importorskip("mlflow")
    pytest.importorskip("lightning")
    return run_checkout_job(shared_root, SCRIPT, "interop", 1)


@pytest.fixture(scope="module")
def rank0_job(shared_root: Path) -> str:
    pytest.importorskip("mlflow")
    return run_checkout_job(shared_root, RANK0_SCRIPT, "mlflow-tb", 2)


async def get_json(jp_fetch: Any, *parts: str, **kwargs: Any) -> Any:
    return json.loads((await jp_fetch("disttrain", "api", *parts, **kwargs)).body)


async def test_mlflow_runs_of_a_job_are_in_the_runs_api(
    jp_fetch: Any, interop_job: str, shared_root: Path
) -> None:
    assert (JobStore(shared_root).job_dir(interop_job) / "mlflow.db").is_file()
    (row,) = (await get_json(jp_fetch, "runs", params={"job": interop_job}))["runs"]
    assert row["run"] == "_mlflow.mlf" and row["status"] == "finished"
    assert row["hparams"] == {"lr": 0.1}
    assert row["metrics"] == {"mlflow/gap": "NaN", "mlflow/loss": 0.2}
    assert row["step"] == 4
    page = await get_json(jp_fetch, "jobs", interop_job, "runs", "_mlflow.mlf", params={"limit": 4})
    assert [p["value"] for p in page["points"]] == [1.0, 0.5, 1 / 3, 0.25] and page["more"] is True
    rest = await get_json(
        jp_fetch, "jobs", interop_job, "runs", "_mlflow.mlf", params={"since": page["next"]}
    )
    assert [(p["name"], p["value"], p["step"]) for p in rest["points"]] == [
        ("loss", 0.2, 4),
        ("gap", "NaN", 4),
    ]
    assert rest["more"] is False and rest["record"]["mlflow_run_id"]


async def test_mlflow_metrics_are_in_the_jobs_tensorboard_dir(
    jp_fetch: Any, rank0_job: str, shared_root: Path
) -> None:
    tb_dir = JobStore(shared_root).tensorboard_dir(rank0_job)
    assert sorted(p.name for p in tb_dir.iterdir()) == ["_mlflow.tb"]
    scalars, _, _ = tensorboard(tb_dir / "_mlflow.tb")
    assert scalars == {
        "mlflow/loss": [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3)), (3, 0.25)],
        "mlflow/acc": [(3, 0.5)],
    }
    (row,) = (await get_json(jp_fetch, "runs", params={"job": rank0_job}))["runs"]
    assert row["run"] == "_mlflow.tb" and row["tensorboard_run"] == f"{rank0_job}/tensorboard/_mlflow.tb"


def test_lightnings_default_logger_writes_into_the_jobs_tensorboard_dir(
    interop_job: str, shared_root: Path
) -> None:
    logdir = JobStore(shared_root).tensorboard_dir(interop_job) / "lightning_logs" / "version_0"
    scalars, _, _ = tensorboard(logdir)
    assert [step for step, _ in scalars["train_loss"]] == [0, 1, 2, 3]


def test_the_users_own_settings_win(tmp_path: Path) -> None:
    spec = JobSpec(name="x", env={"MLFLOW_TRACKING_URI": "http://mlflow:5000"})
    env = rank_env(spec, "x-abcde", "/jobs/x-abcde", cpu=True, working_dir=None, inherited={})
    assert env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
    assert env["PL_TRAINER_DEFAULT_ROOT_DIR"] == "/jobs/x-abcde/tensorboard"
    inherited = {"PL_TRAINER_DEFAULT_ROOT_DIR": "/mine"}
    env = rank_env(
        JobSpec(name="x"), "x-abcde", "/jobs/x-abcde", cpu=True, working_dir=None, inherited=inherited
    )
    assert env["MLFLOW_TRACKING_URI"] == "sqlite:////jobs/x-abcde/mlflow.db"
    assert "PL_TRAINER_DEFAULT_ROOT_DIR" not in env
