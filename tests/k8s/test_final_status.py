"""The final status of a job: decided once its pods have reported, whatever order the
workload's and the pods' watches deliver their news in, and still known once a TTL removed
the workload, its pods and (through ownerReferences) its other objects."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore

from .conftest import DDP_SCRIPT, ddp_spec, wait_for
from .fakeapi import BATCH_JOBS
from .toycluster import CONFIGMAPS, PODS, SERVICES, ToyCluster

JOBS = BATCH_JOBS.key
JOB_ID = "disttrain.io/job-id"


def test_late_pod_watch_does_not_lose_the_failed_rank(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    toy.cluster.watch_delay[PODS] = 1.5  # the Job's end arrives before its pods' last updates
    spec = ddp_spec(workspace, env={"FAIL_RANK": "1"}, options={"flavor": "job"})
    job_id = backend.submit(spec, DDP_SCRIPT)
    status = wait_for(backend, job_id, lambda s: s.is_terminal)
    assert status.phase is JobPhase.FAILED, status.to_dict()
    bad = next(r for r in status.replicas if r.name == "node-1")
    assert (bad.phase, bad.reason) == (JobPhase.FAILED, "Error"), bad
    # The rank's own exit code (sys.exit(3)), not torchrun's 1.
    assert bad.exit_code == 3 and status.exit_code == 3
    assert "replica node-1 failed: Error (exit code 3)" in (status.message or "")
    # The record on disk is the same final answer.
    stored = backend.store.read_status(job_id)
    assert stored is not None and stored.exit_code == 3


def _wait_until(test: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < deadline, "the cluster never got there"
        time.sleep(0.1)


def _ttl_zero(toy: ToyCluster, job_id: str) -> None:
    """A cluster policy that shortens every Job's TTL (ours asks for a day)."""
    toy.cluster.update(JOBS, "team-a", job_id, lambda j: j["spec"].update(ttlSecondsAfterFinished=0))


def test_detached_job_removed_by_its_ttl_reads_its_end_from_the_job_dir(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    job_id = backend.submit(ddp_spec(workspace, options={"flavor": "job"}), DDP_SCRIPT)
    c = toy.cluster
    job, svc = c.get(JOBS, "team-a", job_id), c.get(SERVICES, "team-a", job_id)
    assert job is not None and svc is not None
    assert [r["uid"] for r in svc["metadata"]["ownerReferences"]] == [job["metadata"]["uid"]]
    _ttl_zero(toy, job_id)
    # Nobody looks until the TTL removed the Job, the GC its Service, and its pods are gone.
    _wait_until(lambda: c.get(JOBS, "team-a", job_id) is None and c.get(SERVICES, "team-a", job_id) is None)
    _wait_until(lambda: not [p for p in c.items(PODS) if p["metadata"]["labels"].get(JOB_ID) == job_id])
    status = backend.describe(job_id)
    assert (status.phase, status.exit_code) == (JobPhase.SUCCEEDED, 0), status.message
    node0, node1 = status.replicas
    assert (node0.name, node0.phase, node0.exit_code) == ("node-0", JobPhase.SUCCEEDED, 0)
    assert node1.phase in (JobPhase.SUCCEEDED, JobPhase.CANCELLED)  # stopped once rank 0 was done
    assert "recorded" in (status.message or "")


def test_the_script_configmap_goes_with_its_workload(
    toy: ToyCluster, workspace: Path, tmp_path: Path
) -> None:
    backend = KubernetesBackend(JobStore(tmp_path / "local-jobs"))  # not shared: a ConfigMap
    job_id = backend.submit(ddp_spec(workspace, nodes=1, options={"flavor": "job"}), "print('hi')\n")
    c = toy.cluster
    cm = c.get(CONFIGMAPS, "team-a", f"{job_id}-code")
    assert cm is not None and cm["metadata"]["ownerReferences"][0]["name"] == job_id
    _ttl_zero(toy, job_id)
    _wait_until(lambda: c.get(JOBS, "team-a", job_id) is None)
    _wait_until(lambda: c.get(CONFIGMAPS, "team-a", f"{job_id}-code") is None)
    _wait_until(lambda: c.get(SERVICES, "team-a", job_id) is None)
    # No shared job dir, so no exit record: the job can only say that its Job is gone.
    assert backend.describe(job_id).reason == "WorkloadDeleted"
