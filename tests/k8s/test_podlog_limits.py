"""``pods/log`` reads are bounded in bytes as well as lines (issue 9, item 6)."""

from __future__ import annotations

from pathlib import Path

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.kubernetes.manifests import JOB_ID_LABEL
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.logfiles import CUT_MARKER, MAX_LINE, Budget
from jupyter_disttrain.storage.store import JobStore

from .conftest import ddp_spec, wait_for
from .toycluster import PODS, ToyCluster

SCRIPT = """
print("x" * 200_000, flush=True)
for i in range(3000):
    print(f"line {i} " + "y" * 60, flush=True)
"""


def test_pod_log_reads_cut_long_lines_and_stop_at_the_budget(
    toy: ToyCluster, workspace: Path, tmp_path: Path
) -> None:
    backend = KubernetesBackend(JobStore(tmp_path / "local-jobs"))  # not shared: logs via pods/log
    job_id = backend.submit(ddp_spec(workspace, nodes=1, options={"flavor": "job"}), SCRIPT)
    status = wait_for(backend, job_id, lambda s: s.is_terminal)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    everything = list(backend.logs(job_id))
    assert all(len(ln.text) <= MAX_LINE + len(CUT_MARKER) for ln in everything)
    assert sum(ln.text.endswith(CUT_MARKER) for ln in everything) == 1
    budget = Budget(50_000)
    bounded = list(backend.logs(job_id, budget=budget))
    assert budget.hit and 1 <= len(bounded) < len(everything)
    assert sum(len(ln.text) for ln in bounded) <= 50_000 + MAX_LINE + len(CUT_MARKER)
    # The stream's runs are bounded the same way, and resume where they stopped.
    runs = backend.log_runs(job_id, budget=Budget(50_000))
    rest = backend.log_runs(job_id, offset=runs[-1].offset)
    assert [t for r in runs + rest for t in r.lines] == [ln.text for ln in everything]


def test_pod_logs_are_kept_in_the_job_dir_at_cancel(toy: ToyCluster, workspace: Path, tmp_path: Path) -> None:
    """Without a shared job dir ``pods/log`` is the only copy of the output, and it goes with the
    pods: cancel keeps each pod's last log in the local job dir first."""
    backend = KubernetesBackend(JobStore(tmp_path / "local-jobs"))  # not shared: logs via pods/log
    spec = ddp_spec(workspace, nodes=2, options={"flavor": "job"})
    job_id = backend.submit(spec, "import time\nprint('started', flush=True)\ntime.sleep(300)\n")
    wait_for(backend, job_id, lambda s: sum("started" in ln.text for ln in backend.logs(job_id)) == 2)
    status = backend.cancel(job_id)
    assert status.phase is JobPhase.CANCELLED
    assert not [p for p in toy.cluster.items(PODS) if p["metadata"]["labels"].get(JOB_ID_LABEL) == job_id]
    kept = {(ln.replica, ln.rank, ln.text) for ln in backend.logs(job_id) if "started" in ln.text}
    assert kept == {("node-0", 0, "[rank0]:started"), ("node-1", 1, "[rank1]:started")}
    assert sorted(p.name for p in backend.store.logs_dir(job_id).iterdir()) == ["node-0.log", "node-1.log"]
    backend.delete(job_id)  # no pods left to read: the kept files stay the job's logs
    assert len([ln for ln in backend.logs(job_id) if "started" in ln.text]) == 2
