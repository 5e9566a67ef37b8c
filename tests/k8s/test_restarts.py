"""What ``--max-restarts`` does in each flavour (issue 10, item 10; docs/kubernetes.md "Restarts"):
the Indexed Job replaces a failed pod (``backoffLimit``), a PyTorchJob restarts its container in
place (``restartPolicy: OnFailure``); both with a fresh torchrun, so the script starts over."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.model.specs import JobPhase

from .conftest import ddp_spec, start_toy, wait_for
from .test_control_loop import backend_store
from .toycluster import PODS

# Fails the first time (a transient error), works when run again: the marker is on the shared PVC.
ONCE = """
import os, pathlib, sys
marker = pathlib.Path(os.environ["DISTTRAIN_JOB_DIR"]) / "tried"
if not marker.exists():
    marker.write_text("1")
    sys.exit(3)
print("second run ok", flush=True)
"""


@pytest.mark.parametrize("max_restarts", [1, 0])
@pytest.mark.parametrize("flavor", ["job", "pytorchjob"])
def test_a_transient_failure_is_retried_with_max_restarts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workspace: Path, flavor: str, max_restarts: int
) -> None:
    gen = start_toy(monkeypatch, tmp_path, install=(flavor,) if flavor != "job" else ())
    next(gen)
    try:
        backend = KubernetesBackend(backend_store(workspace))
        spec = ddp_spec(workspace, nodes=1, max_restarts=max_restarts, options={"flavor": flavor})
        job_id = backend.submit(spec, ONCE)
        workload = backend.store.read_record(job_id).request["manifests"][-1]
        if flavor == "job":  # a failed pod is replaced by a new one (same index, same hostname)
            pod_policy = workload["spec"]["template"]["spec"]["restartPolicy"]
            assert (workload["spec"]["backoffLimit"], pod_policy) == (max_restarts, "Never")
        else:  # the operator's pods restart their container in place
            master = workload["spec"]["pytorchReplicaSpecs"]["Master"]
            assert master["restartPolicy"] == ("OnFailure" if max_restarts else "Never")
            assert workload["spec"]["runPolicy"]["backoffLimit"] == max_restarts
        status = wait_for(backend, job_id, lambda s: s.is_terminal)
        (replica,) = status.replicas
        if max_restarts:
            assert status.phase is JobPhase.SUCCEEDED, status.message
            assert replica.restarts == 1  # a replaced pod or a restarted container: counted alike
            assert any("second run ok" in ln.text for ln in backend.logs(job_id))
        else:
            assert (status.phase, replica.exit_code) == (JobPhase.FAILED, 3), status.message
    finally:
        gen.close()


# Waits to be evicted the first time; works when run again.
EVICTED_ONCE = """
import os, pathlib, time
marker = pathlib.Path(os.environ["DISTTRAIN_JOB_DIR"]) / "started"
if not marker.exists():
    marker.write_text("1")
    time.sleep(120)
print("after the eviction", flush=True)
"""


@pytest.mark.parametrize(("version", "survives"), [((1, 33), True), ((1, 25), False)])
def test_an_evicted_pod_is_replaced_without_spending_a_restart(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workspace: Path, version: tuple[int, int], survives: bool
) -> None:
    # podFailurePolicy (from 1.26) ignores a pod the cluster disrupted (a drain, a preemption):
    # with --max-restarts 0 the Job still replaces it. Before 1.26 the eviction fails the job.
    gen = start_toy(monkeypatch, tmp_path, version=version)
    toy = next(gen)
    try:
        backend = KubernetesBackend(backend_store(workspace))
        job_id = backend.submit(ddp_spec(workspace, nodes=1, options={"flavor": "job"}), EVICTED_ONCE)
        job_dir = Path(backend.store.job_dir(job_id))
        wait_for(backend, job_id, lambda s: (job_dir / "started").exists() or s.is_terminal)
        (pod,) = [p for p in toy.cluster.items(PODS) if p["metadata"]["name"].startswith(job_id)]
        toy.kubelet.evict(pod["metadata"]["namespace"], pod["metadata"]["name"])
        status = wait_for(backend, job_id, lambda s: s.is_terminal)
        if survives:
            assert status.phase is JobPhase.SUCCEEDED, status.message
            assert any("after the eviction" in ln.text for ln in backend.logs(job_id))
        else:
            assert status.phase is JobPhase.FAILED, status.message
    finally:
        gen.close()


# Saves a DCP checkpoint and waits to be evicted the first time; the replacing pod's rank starts
# from it: DCP's load() is given no checkpoint_id, the rank wrapper's patch feeds it the checkpoint.
CHECKPOINTED_THEN_EVICTED = """
import os, pathlib, time
import torch
import torch.distributed.checkpoint as dcp
from jupyter_disttrain import em
print("resume_from", em.resume_from(), flush=True)
if em.resume_from() is None:
    dcp.save({"step": torch.tensor(5)}, checkpoint_id=os.path.join(em.checkpoint_dir(), "step_5"))
    (pathlib.Path(os.environ["DISTTRAIN_JOB_DIR"]) / "started").write_text("1")
    time.sleep(120)
state = {"step": torch.tensor(0)}
dcp.load(state)
print("loaded step", int(state["step"]), flush=True)
"""


def test_an_evicted_pods_replacement_resumes_from_the_pvc_checkpoint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workspace: Path
) -> None:
    # The image's jupyter_disttrain (em, and the pod wrapper's runtime.restarts) is this checkout's.
    image_env = {"pytorch:local": {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}}
    gen = start_toy(monkeypatch, tmp_path, version=(1, 33), image_env=image_env)
    toy = next(gen)
    try:
        backend = KubernetesBackend(backend_store(workspace))
        spec = ddp_spec(workspace, nodes=1, options={"flavor": "job"})
        job_id = backend.submit(spec, CHECKPOINTED_THEN_EVICTED)
        job_dir = Path(backend.store.job_dir(job_id))
        wait_for(backend, job_id, lambda s: (job_dir / "started").exists() or s.is_terminal)
        (pod,) = [p for p in toy.cluster.items(PODS) if p["metadata"]["name"].startswith(job_id)]
        toy.kubelet.evict(pod["metadata"]["namespace"], pod["metadata"]["name"])
        status = wait_for(backend, job_id, lambda s: s.is_terminal)
        assert status.phase is JobPhase.SUCCEEDED, status.message
        said = [ln.text for ln in backend.logs(job_id) if "resume_from" in ln.text or "loaded" in ln.text]
        checkpoint = job_dir / "checkpoints" / "step_5"
        expected = ["resume_from None", f"resume_from {checkpoint}", "loaded step 5"]
        assert said == [f"[rank0]:{line}" for line in expected], said  # torchrun --tee's prefix
    finally:
        gen.close()


# Six checkpoints, one every 0.3 s, then a pause longer than the 2 s a file needs to count as written.
SIX_CHECKPOINTS = """
import os, time, torch
for step in range(6):
    torch.save({"step": step}, os.path.join(os.environ["DISTTRAIN_CHECKPOINT_DIR"], f"step_{step}.pt"))
    time.sleep(0.3)
time.sleep(2.5)
print("saved", flush=True)
"""


def test_keep_checkpoints_prunes_a_pods_checkpoints(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workspace: Path
) -> None:
    # The pod wrapper of rank 0's replica prunes (runtime/retention.py), as rank 0's rank wrapper
    # does on the local and Slurm backends: the newest 2 complete ones are left.
    gen = start_toy(monkeypatch, tmp_path)
    next(gen)
    try:
        backend = KubernetesBackend(backend_store(workspace))
        job_id = backend.submit(ddp_spec(workspace, nodes=1, keep_checkpoints=2), SIX_CHECKPOINTS)
        status = wait_for(backend, job_id, lambda s: s.is_terminal)
        assert status.phase is JobPhase.SUCCEEDED, status.message
        left = sorted(p.name for p in (backend.store.job_dir(job_id) / "checkpoints").iterdir())
        assert left == ["step_4.pt", "step_5.pt"]
    finally:
        gen.close()
