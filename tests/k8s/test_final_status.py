"""The final status of a job: decided once its pods have reported, whatever order the
workload's and the pods' watches deliver their news in."""

from __future__ import annotations

from pathlib import Path

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.specs import JobPhase

from .conftest import DDP_SCRIPT, ddp_spec, wait_for
from .toycluster import PODS, ToyCluster


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
