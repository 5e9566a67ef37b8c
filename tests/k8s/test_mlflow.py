"""MLflow in a Kubernetes job whose job dir is on the PVC: the pod of rank 0's replica follows the
job's ``mlflow.db`` into its TensorBoard dir, as the local launcher does, before its exit record."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.storage.store import JobStore
from tests.em_helpers import tensorboard

from .conftest import ddp_spec, wait_for
from .toycluster import ToyCluster

CHECKOUT = str(Path(__file__).resolve().parents[2])  # the pods import this checkout's package
SCRIPT = """
import os

if int(os.environ["RANK"]) == 0:
    import mlflow

    with mlflow.start_run(run_name="pod"):
        for step in range(3):
            mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
"""


def test_rank0s_pod_writes_mlflows_metrics_into_the_jobs_tensorboard_dir(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    pytest.importorskip("mlflow")
    spec = ddp_spec(workspace, nodes=2, options={"flavor": "job"}, env={"PYTHONPATH": CHECKOUT})
    job_id = backend.submit(spec, SCRIPT)
    status = wait_for(backend, job_id, lambda s: s.phase.value in ("Succeeded", "Failed"), timeout=240)
    assert status.phase.value == "Succeeded", status
    tb_dir = JobStore(workspace / ".disttrain" / "jobs").tensorboard_dir(job_id)
    assert sorted(p.name for p in tb_dir.iterdir()) == ["_mlflow.pod"]
    scalars, _, _ = tensorboard(tb_dir / "_mlflow.pod")
    assert scalars == {"mlflow/loss": [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]}
