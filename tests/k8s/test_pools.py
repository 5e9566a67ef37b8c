"""Kubernetes warm pools on the toy cluster (issue 36 item 1): a job's pod kept with --keep-warm,
a re-run of the same shape forked in it through pods/exec (no new Pod, the edited module seen,
module state fresh), another shape told why not, listed, released under a running job (which
fails naming the pod), and a pool that ends itself when idle."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.kubernetes.exits import read_exits
from jupyter_disttrain.backends.kubernetes.poolshape import POOL_LABEL
from jupyter_disttrain.model.errors import PoolBusyError
from jupyter_disttrain.model.specs import JobPhase, JobSpec

from .conftest import ddp_spec, wait_for
from .toycluster import ToyCluster

PODS = "/v1/pods"
SCRIPT = """\
import os, sys, time
import torch.distributed as dist
import mymod
mymod.COUNTER += 1
dist.init_process_group("gloo")
job = os.environ['DISTTRAIN_JOB_ID']
print(f"rank {dist.get_rank()} value={mymod.VALUE} counter={mymod.COUNTER} job={job}")
dist.destroy_process_group()
time.sleep(float(os.environ.get("HOLD", "0")))
"""


def pods_created(toy: ToyCluster) -> int:
    with toy.cluster.cond:
        return sum(1 for _, key, kind, _ in toy.cluster.history if key == PODS and kind == "ADDED")


def wait_until(test, timeout: float = 90.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.2)


def first_job(backend: KubernetesBackend, workspace: Path, nodes: int, script: str) -> tuple[JobSpec, str]:
    """A pool's first job (``nodes`` x 2 processes, --keep-warm 60), run to its end; its spec, id."""
    (workspace / "project" / "mymod.py").write_text("VALUE = 'first'\nCOUNTER = 0\n")
    spec = ddp_spec(workspace, nodes=nodes, nproc_per_node=2, options={"keep_warm": "60"})
    first = backend.submit(spec, script)
    assert wait_for(backend, first, lambda s: s.is_terminal).phase is JobPhase.SUCCEEDED
    return spec, first


def test_a_rerun_forks_in_the_kept_pod_and_the_pool_is_owned(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    spec, first = first_job(backend, workspace, 1, SCRIPT)
    # The pod stays, holding the zygote; a restarted kernel (a new backend) finds it by its label.
    again = KubernetesBackend(backend.store)
    wait_until(lambda: [p.releases_in is not None for p in again.pools()] == [True])
    (pool,) = [p for p in backend.pools() if p.id == first]
    assert pool.jobs == []

    # A re-run of the same shape: "warm" in the dry run, no new Pod, the edited module read fresh.
    (workspace / "project" / "mymod.py").write_text("VALUE = 'edited'\nCOUNTER = 0\n")
    assert "# start: warm: pool " in backend.dryrun(spec).text
    created = pods_created(toy)
    second = backend.submit(spec, SCRIPT)
    status = wait_for(backend, second, lambda s: s.is_terminal)
    lines = [ln.text for ln in backend.logs(second)]
    assert status.phase is JobPhase.SUCCEEDED, (status.message, lines[-20:])
    assert any(f"rank 1 value=edited counter=1 job={second}" in t for t in lines), lines[-20:]
    assert pods_created(toy) == created
    assert any(e.reason == "Started" and "pool pod" in e.message for e in status.events)
    (record,) = read_exits(backend.store.job_dir(second)).values()
    assert "forked from this pool pod's zygote" in record["rank_wrapper"]
    # Its lines say their rank, whole, as the cold pod's did (torchrun --tee, the [rankN]: prefix).
    for job in (first, second):
        said = [ln for ln in backend.logs(job) if " value=" in ln.text]
        assert sorted(ln.rank for ln in said) == [0, 1], [ln.text for ln in said]
        assert all(ln.text.startswith(f"[rank{ln.rank}]:rank {ln.rank} value=") for ln in said), said

    # Another shape is told the first field that differs, and runs cold.
    other = ddp_spec(workspace, nodes=1, nproc_per_node=1, options={"keep_warm": "60"})
    assert f"cold: pool {pool.fingerprint} has nodes 1x2, this job 1x1" in backend.dryrun(other).text

    # A cancelled warm job leaves the pool usable.
    holding = ddp_spec(workspace, nodes=1, nproc_per_node=2, env={"HOLD": "60"}, options={"keep_warm": "60"})
    cancelled = backend.submit(holding, SCRIPT)
    wait_until(lambda: any(cancelled in p.jobs for p in backend.pools()))
    assert backend.cancel(cancelled).phase is JobPhase.CANCELLED
    wait_until(lambda: [p.jobs for p in backend.pools() if p.id == first] == [[]])

    # A rank that crashes costs its run only: the job fails as a cold pod's does (its exit 128 +
    # SIGSEGV), the pool serves on (the job below runs in it).
    crash = "import ctypes, os\nif os.environ['RANK'] == '1':\n    ctypes.string_at(0)\n"
    crashed = wait_for(backend, backend.submit(spec, crash), lambda s: s.is_terminal)
    assert crashed.phase is JobPhase.FAILED and "(exit code 139)" in str(crashed.message), crashed.message
    assert crashed.start_time and all(r.start_time for r in crashed.replicas), crashed.replicas
    assert any(e.reason == "Started" and "pool pod" in e.message for e in crashed.events)

    # A job running in the pool: refused a plain release, then released by force: the job fails
    # naming the pod, nothing hangs.
    held = backend.submit(holding, SCRIPT)
    wait_until(lambda: any(held in p.jobs for p in backend.pools()))
    (busy,) = [p for p in backend.pools() if p.id == first]
    with pytest.raises(PoolBusyError, match=held):
        backend.release(busy)
    assert backend.release(busy, force=True).released
    status = wait_for(backend, held, lambda s: s.is_terminal)
    assert status.phase is JobPhase.FAILED and pool.nodes[0].step in (status.message or ""), status.message
    assert pods_created(toy) == created


def test_an_evicted_pool_pod_is_replaced_and_a_pool_ends_itself_when_idle(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    (workspace / "project" / "mymod.py").write_text("VALUE = 1\nCOUNTER = 0\n")
    job = backend.submit(ddp_spec(workspace, nodes=1, options={"keep_warm": "8"}), SCRIPT)
    assert wait_for(backend, job, lambda s: s.is_terminal).phase is JobPhase.SUCCEEDED
    (pool,) = backend.pools()
    toy.kubelet.evict("team-a", pool.nodes[0].step)  # its Job replaces the pod: the job is not run again
    wait_until(lambda: [p.nodes[0].step for p in backend.pools()] not in ([], [pool.nodes[0].step]))

    def ended() -> bool:
        pods = [p for p in toy.cluster.items(PODS) if p["metadata"]["labels"].get(POOL_LABEL)]
        return bool(pods) and all(p["status"].get("phase") in ("Succeeded", "Failed") for p in pods)

    wait_until(ended)  # the pod's own clock: no notebook call ends it
    assert backend.pools() == []
    assert sum("rank 0 value=1" in ln.text for ln in backend.logs(job)) == 1
