"""``%%distrun --backend kubernetes --nodes 2 --gpus 1`` in a real kernel, against the toy cluster:
the cell is packaged, submitted as an Indexed Job, runs as CPU torchrun pods, and its output and
final status come back to the notebook."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore

from .toycluster import ToyCluster

CELL = """\
%%distrun --backend kubernetes --flavor job --namespace team-a --image pytorch:local --nodes 2 --gpus 1 --pvc workspace:{ws} --name magic --pending-timeout 10m
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum {t.item():.0f}")
dist.destroy_process_group()
"""  # noqa: E501


def test_distrun_cell_runs_on_the_toy_cluster(
    toy: ToyCluster, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = workspace / ".disttrain" / "jobs"
    monkeypatch.setenv("DISTTRAIN_JOB_ROOT", str(root))  # the kernel inherits this and KUBECONFIG
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))  # this tree's code
    nb = new_notebook(
        cells=[
            new_code_cell("%load_ext jupyter_disttrain"),
            new_code_cell(CELL.replace("{ws}", str(workspace))),
        ]
    )
    client = NotebookClient(
        nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(workspace)}}
    )
    client.execute()
    (job_id,) = JobStore(root).ids()
    status = JobStore(root).read_status(job_id)
    assert status is not None and status.phase is JobPhase.SUCCEEDED, status
    record = JobStore(root).read_record(job_id)
    assert record.request["flavor"] == "job" and [m["kind"] for m in record.request["manifests"]] == [
        "Service",
        "Job",
    ]
    shown = nbformat.writes(nb)
    assert "rank 0 of 2: sum 3" in shown and "rank 1 of 2: sum 3" in shown
    assert toy.cluster.get("batch/v1/jobs", "team-a", job_id) is not None
