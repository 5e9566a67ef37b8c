"""The diagnosis of a real two-pod gloo job on the toy cluster: each pod's ranks read through
``pods/exec`` by the job's own runtime, and the same verdict as on this machine."""

from __future__ import annotations

import time
from pathlib import Path

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.jobs.manager import manager_for
from tests.test_diagnosis import LATE_SCRIPT, LATE_VERDICT

from .conftest import ddp_spec, wait_for
from .toycluster import ToyCluster


def test_a_rank_late_to_all_reduce_5_is_named_through_pods_exec(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    job_id = backend.submit(ddp_spec(workspace, options={"flavor": "job"}), LATE_SCRIPT)
    try:
        wait_for(backend, job_id, lambda s: any("step 3" in ln.text for ln in backend.logs(job_id)), 180)
        time.sleep(0.5)  # rank 0 enters all_reduce #5
        incident = manager_for(backend.store).diagnoses.diagnose(job_id)
        assert incident.verdict == LATE_VERDICT
        assert incident.seconds <= 5.0  # pods/exec included
        assert {p.replica: p.state for p in incident.ranks} == {"rank-0": "waiting", "rank-1": "not joined"}
        assert "disttrain_runtime" not in (incident.ranks[0].stack or "x")  # the product's frames folded
    finally:
        backend.cancel(job_id)
