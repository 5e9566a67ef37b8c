"""One launch contract: a pod's processes get the same variables as a local job's, and modules
beside the notebook import in the pods (issue 10 item 1, issue 11 item 3)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.local.backend import LocalBackend
from jupyter_disttrain.model.specs import JobPhase, JobSpec
from jupyter_disttrain.runtime import contract
from jupyter_disttrain.storage.store import JobStore

from .conftest import ddp_spec, start_toy, wait_for
from .toycluster import ToyCluster

IMPORTS = """\
import os, sys
import mymod      # beside the notebook (the working dir), not beside train.py
import imagemod   # on the image's own PYTHONPATH
print(f"mymod={mymod.VALUE} imagemod={imagemod.VALUE} job={os.environ['DISTTRAIN_JOB_ID']}", flush=True)
"""


@pytest.fixture
def image_with_pythonpath(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ToyCluster]:
    site = tmp_path / "image-site"
    site.mkdir()
    (site / "imagemod.py").write_text("VALUE = 'from-image'\n")
    image_env = {"pytorch:local": {"PYTHONPATH": str(site)}}
    yield from start_toy(monkeypatch, tmp_path, install=("pytorchjob", "t9k"), image_env=image_env)


@pytest.mark.parametrize("flavor", ["job", "pytorchjob", "t9k"])
def test_modules_beside_the_notebook_and_on_the_images_path_import_in_the_pods(
    image_with_pythonpath: ToyCluster, backend: KubernetesBackend, workspace: Path, flavor: str
) -> None:
    """Also under T9k, whose controller runs torchrun itself: each rank's python starts from our
    entry script, which puts the notebook's dir in front of the image's PYTHONPATH."""
    (workspace / "project" / "mymod.py").write_text("VALUE = 42\n")
    job_id = backend.submit(ddp_spec(workspace, nodes=1, options={"flavor": flavor}), IMPORTS)
    status = wait_for(backend, job_id, lambda s: s.is_terminal)
    lines = [ln.text for ln in backend.logs(job_id)]
    assert status.phase is JobPhase.SUCCEEDED, (status.message, lines[-20:])
    assert any(f"mymod=42 imagemod=from-image job={job_id}" in t for t in lines), lines[-20:]


def test_local_and_kubernetes_give_the_same_variables(workspace: Path, tmp_path: Path) -> None:
    spec = JobSpec(name="same", nproc_per_node=2, env={"MSG": "hi"}, working_dir=str(workspace / "project"))
    local = LocalBackend(JobStore(tmp_path / "local")).dryrun(spec)
    (agent,) = local.request.agents
    pod = KubernetesBackend(JobStore(tmp_path / "k8s")).dryrun(
        ddp_spec(workspace, nproc_per_node=2, env={"MSG": "hi"}, options={"flavor": "job", "namespace": "a"})
    )
    docs = pod.request.manifests
    workload = next(d for d in docs if d["kind"] == "Job")
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    pod_env = {e["name"]: e.get("value") for e in container["env"]}
    shared = {
        contract.JOB_ID_ENV,
        contract.JOB_DIR_ENV,
        contract.TENSORBOARD_DIR_ENV,
        "PYTHONUNBUFFERED",
        "OMP_NUM_THREADS",
        "PL_TRAINER_DEVICES",
        "PL_TRAINER_NUM_NODES",
        "MSG",
    }
    assert shared <= set(agent.env) and shared <= set(pod_env)
    for name in ("PYTHONUNBUFFERED", "OMP_NUM_THREADS", "PL_TRAINER_DEVICES", "MSG"):
        assert agent.env[name] == pod_env[name]
    # The notebook's directory comes first on both (a pod puts it in front of the image's).
    assert agent.env["PYTHONPATH"].split(":")[0] == str(workspace / "project")
    assert pod_env[contract.PYTHONPATH_ENV] == str(workspace / "project")
