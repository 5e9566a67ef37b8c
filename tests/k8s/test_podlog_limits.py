"""``pods/log`` reads are bounded in bytes as well as lines (issue 9, item 6)."""

from __future__ import annotations

from pathlib import Path

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.logfiles import CUT_MARKER, MAX_LINE, Budget
from jupyter_disttrain.specs import JobPhase
from jupyter_disttrain.store import JobStore

from .conftest import ddp_spec, wait_for
from .toycluster import ToyCluster

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
