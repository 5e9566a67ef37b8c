"""``%%distrun`` on Slurm from real kernels: a batch job on two nodes (its em run and resource
samples), a failing one failing its cell, and the job-step path from a kernel inside ``salloc``."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from nbformat.v4 import new_code_cell, new_notebook

from jupyter_disttrain import api
from jupyter_disttrain.jobs.manager import manager_for
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore

from .cluster import SlurmCluster

pytestmark = pytest.mark.slurm

DDP_CELL = """%%distrun --backend slurm --gpus 1 --nodes 2 --name ddp --monitor-interval 0.5
import os, time
from jupyter_disttrain import em
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
run = em.create_run("fit")
for step in range(4):
    loss = model(torch.ones(2, 4)).sum()
    loss.backward()
    run.log("train", {"loss": float(loss.detach())}, step=step)
    time.sleep(0.5)
run.finish()
print("rank", dist.get_rank(), "of", dist.get_world_size(), "in Slurm job", os.environ["SLURM_JOB_ID"])
dist.destroy_process_group()
"""
FAILING_CELL = """%%distrun --backend slurm --gpus 2 --name fails
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise ZeroDivisionError("rank one divided by zero")
dist.all_reduce(torch.ones(1))
"""


def execute(cells: list[str], path: Path, kernel: str = "python3") -> nbformat.NotebookNode:
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    client = NotebookClient(nb, timeout=240, kernel_name=kernel, resources={"metadata": {"path": str(path)}})
    with contextlib.suppress(CellExecutionError):  # the notebook says which cell failed
        client.execute()
    return nb


def test_a_two_node_job_from_a_kernel_with_its_run_and_resources_then_a_failing_one(
    tmp_path: Path, job_root: Path, slurm_cluster: SlurmCluster
) -> None:
    cells = [
        "%load_ext jupyter_disttrain",
        "import torch, torch.distributed as dist",
        DDP_CELL,
        FAILING_CELL,
        "print('next')",
    ]
    nb = execute(cells, tmp_path)
    store = JobStore(job_root)
    ddp = api.get_job(next(r.id for r in store.records() if r.spec.name == "ddp"), store)
    status = ddp.status()
    assert status.phase is JobPhase.SUCCEEDED, status.message
    slurm_job = ddp.record.backend_state["slurm_job_id"]
    lines = sorted(ln.text for ln in ddp.logs() if ln.rank is not None)
    assert lines == [f"rank {r} of 2 in Slurm job {slurm_job}" for r in (0, 1)]
    assert sorted(r.node for r in status.replicas) == ["dt1", "dt2"]  # Slurm's names of the nodes
    assert not [o for o in nb.cells[2].outputs if o.output_type == "error"]
    manager = manager_for(store)
    (fit,) = [r for r in manager.list_runs(ddp.id) if r.run == "fit"]
    assert (fit.status, fit.step, sorted(fit.metrics)) == ("finished", 3, ["train/loss"])
    resources = manager.resources(ddp.id)
    # Each node's agent sampled the rank on its node into the job dir.
    assert sorted(resources.replicas) == ["rank-0", "rank-1"]
    assert all(r.samples for r in resources.replicas.values())
    # The failing job failed its cell in one line naming the rank, and Run All stopped there.
    said = nbformat.writes(nb.cells[3])
    assert (
        "JobFailedError" in said
        and "rank-1" in said
        and "ZeroDivisionError: rank one divided by zero" in said
    )
    assert nb.cells[4].outputs == []


CANCEL_LONG = """import time
from jupyter_disttrain import api
(job,) = [api.get_job(s.job_id) for s in api.list_jobs() if s.job_id.startswith("long-")]
while not any(line.text == "long" for line in job.logs()):
    time.sleep(0.2)
status = job.cancel()
print(status.phase.value, status.message)
"""


@pytest.fixture
def salloc_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurm_cluster: SlurmCluster) -> str:
    """A kernel started inside ``salloc --nodes=2``, as a user starts ``jupyter lab`` there."""
    spec = tmp_path / "kernels" / "salloc"
    spec.mkdir(parents=True)
    argv = ["salloc", "--nodes=2", "--job-name=kernel", sys.executable, "-m", "ipykernel_launcher"]
    argv += ["-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "salloc", "language": "python"})
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    yield "salloc"
    slurm_cluster.run("scancel", "--name=kernel", check=False)  # an allocation the kernel left


def test_a_kernel_inside_an_allocation_runs_job_steps_without_asking(
    tmp_path: Path, job_root: Path, salloc_kernel: str
) -> None:  # salloc_kernel starts the cluster
    cells = [
        "%load_ext jupyter_disttrain",
        "import os; print(os.environ['SLURM_JOB_ID'], os.environ['SLURM_JOB_NUM_NODES'])",
        "%%distrun --gpus 1 --nodes 2 --dry-run\nprint(1)",
        "%%distrun --gpus 1 --nodes 2 --name steps\nimport os\nprint('step', os.environ['SLURM_STEP_ID'])",
        "%%distrun --gpus 1 --name long --detach\nimport time\nprint('long', flush=True)\ntime.sleep(300)",
        CANCEL_LONG,
    ]
    nb = execute(cells, tmp_path, kernel=salloc_kernel)
    allocation, nodes = "".join(o.get("text", "") for o in nb.cells[1].outputs).split()
    assert nodes == "2"
    dry = "".join(o.get("text", "") for o in nb.cells[2].outputs)
    assert "slurm is the default backend here: this kernel runs in a Slurm allocation of several nodes" in dry
    assert f"job steps in allocation {allocation} (no queue)" in dry
    # Each node's agent forked from that node's warm step (node 0's started ahead by %load_ext),
    # never from the kernel's own zygote.
    (start,) = [line for line in dry.splitlines() if line.startswith("# start:")]
    assert start.startswith("# start: warm: ") and "warm step" in start, start
    assert f"srun --jobid={allocation} --job-name=" in dry
    (record,) = [r for r in JobStore(job_root).records() if r.spec.name == "steps"]
    job = api.get_job(record.id, JobStore(job_root))
    assert job.record.spec.backend == "slurm" and job.record.request["mode"] == "step"
    status = job.status()
    assert status.phase is JobPhase.SUCCEEDED, status.message
    (said,) = [e.message for e in status.events if e.reason == "Slurm"]  # in the job's details
    assert said.startswith("slurm is the default backend here") and f"allocation {allocation}" in said
    steps = sorted(ln.text for ln in job.logs() if ln.rank is not None)
    assert len(steps) == 2 and all(t.startswith("step ") for t in steps) and steps[0] != steps[1]
    # Cancelled from the kernel: its launcher (beside the kernel) stopped the step, said why.
    assert "".join(o.get("text", "") for o in nb.cells[5].outputs).split() == [
        "Cancelled",
        "cancelled",
        "by",
        "the",
        "user",
    ]
    (long,) = [r for r in JobStore(job_root).records() if r.spec.name == "long"]
    assert JobStore(job_root).read_status(long.id).phase is JobPhase.CANCELLED  # type: ignore[union-attr]
