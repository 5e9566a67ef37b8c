"""The server's guard of Kubernetes jobs on the toy cluster: a pod that stops making progress is
flagged stalled at its threshold, and diagnosed through pods/exec (``jobs/guard.py: ServerGuard``)."""

from __future__ import annotations

import time
from pathlib import Path

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.jobs.guard import ServerGuard
from jupyter_disttrain.jobs.manager import manager_for
from jupyter_disttrain.monitoring import guard, incidents
from tests.test_diagnosis import LATE_SCRIPT

from .conftest import ddp_spec, wait_for
from .toycluster import ToyCluster


def test_a_stalled_kubernetes_job_is_flagged_and_diagnosed_by_the_server(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    options = {"flavor": "job", "guard": "diagnose", "stall_floor": 3}
    job_id = backend.submit(ddp_spec(workspace, options=options), LATE_SCRIPT)
    manager = manager_for(backend.store)
    watcher = ServerGuard(manager)
    try:
        wait_for(backend, job_id, lambda s: any("step 3" in ln.text for ln in backend.logs(job_id)), 180)
        started = time.monotonic()
        while not (found := watcher.look()):
            assert time.monotonic() - started < 60
            time.sleep(0.5)
        state = found[job_id]
        assert (state.state, state.action, state.threshold) == ("stalled", "diagnose", 3.0)
        job_dir = backend.store.job_dir(job_id)
        assert guard.read_state(job_dir) == state and state.incident is not None
        kept = incidents.read(job_dir, state.incident)
        assert kept is not None and kept.trigger == "stalled"
        assert kept.verdict.startswith("rank-1 has not joined all_reduce #5 (default group)")
        summary = next(s for s in manager.list_jobs() if s.record.id == job_id).summary
        assert summary["guard"]["state"] == "stalled"
    finally:
        backend.cancel(job_id)
