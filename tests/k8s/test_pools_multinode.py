"""Kubernetes warm pools of several nodes on the toy cluster (issue 36 item 1): a 2-node job's
pods kept as one pool, a re-run of its shape forked in every pod (no new Pod; node 0's pod
hosts the rendezvous at the pool's address; all four ranks all-reduce), a one-node job told
why not, cancel, a pool pod lost mid-run, the listing and the release of the whole pool."""

from __future__ import annotations

from pathlib import Path

from jupyter_disttrain.backends.kubernetes import KubernetesBackend, pools, poolshape
from jupyter_disttrain.backends.kubernetes.client import PODS
from jupyter_disttrain.backends.kubernetes.request import KubeRequest
from jupyter_disttrain.backends.warm.plan import zygote_dir
from jupyter_disttrain.model.specs import JobPhase

from .conftest import ddp_spec, wait_for
from .test_pools import first_job, pods_created, wait_until
from .toycluster import ToyCluster

SCRIPT = """\
import os, time
import torch
import torch.distributed as dist
import mymod
mymod.COUNTER += 1
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
print(f"rank {dist.get_rank()}/{dist.get_world_size()} node={os.environ['GROUP_RANK']} "
      f"sum={total.item():.0f} value={mymod.VALUE} counter={mymod.COUNTER}", flush=True)
dist.destroy_process_group()
time.sleep(float(os.environ.get("HOLD", "0")))
"""


def test_a_two_node_pool_forks_every_node_and_goes_as_one(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    spec, first = first_job(backend, workspace, 2, SCRIPT)
    # Both pods stay as one pool: one entry, a node per pod, each pod's server answering.
    wait_until(lambda: [[n.node for n in p.nodes] for p in backend.pools() if p.releases_in] == [[0, 1]])
    (pool,) = backend.pools()
    assert pool.id == first and pool.jobs == []
    pods = [n.step for n in pool.nodes]

    # A re-run of the same shape forks in both pods: no new Pod, four ranks all-reduce, the edited
    # module is read fresh and its state starts over.
    (workspace / "project" / "mymod.py").write_text("VALUE = 'edited'\nCOUNTER = 0\n")
    assert f"# start: warm: pool {pool.fingerprint} (pods {', '.join(pods)})" in backend.dryrun(spec).text
    created = pods_created(toy)
    second = backend.submit(spec, SCRIPT)
    status = wait_for(backend, second, lambda s: s.is_terminal)
    lines = [ln.text for ln in backend.logs(second)]
    assert status.phase is JobPhase.SUCCEEDED, (status.message, lines[-20:])
    for rank in range(4):
        said = f"rank {rank}/4 node={rank // 2} sum=10 value=edited counter=1"
        assert any(said in t for t in lines), (said, lines[-20:])
    assert {ln.replica for ln in backend.logs(second) if "sum=10" in ln.text} == {"node-0", "node-1"}
    assert [r.phase for r in status.replicas] == [JobPhase.SUCCEEDED] * 2
    assert pods_created(toy) == created
    assert any(e.reason == "Started" and "pool pods" in e.message for e in status.events)

    # A one-node job is told the field that differs, and runs cold.
    one = ddp_spec(workspace, nodes=1, nproc_per_node=2, options={"keep_warm": "60"})
    assert f"cold: pool {pool.fingerprint} has nodes 2x2, this job 1x2" in backend.dryrun(one).text

    # Cancel stops the job's wrapper in every pod; the pool stays usable.
    holding = ddp_spec(workspace, nodes=2, nproc_per_node=2, env={"HOLD": "60"}, options={"keep_warm": "60"})
    cancelled = backend.submit(holding, SCRIPT)
    wait_until(lambda: [n.jobs for p in backend.pools() for n in p.nodes] == [[cancelled]] * 2)
    assert backend.cancel(cancelled).phase is JobPhase.CANCELLED
    wait_until(lambda: [n.jobs for p in backend.pools() for n in p.nodes] == [[], []])

    # A pool pod lost mid-run fails the job naming it, and the other node's ranks are stopped.
    lost = backend.submit(holding, SCRIPT)
    wait_until(lambda: [n.jobs for p in backend.pools() for n in p.nodes] == [[lost]] * 2)
    toy.kubelet.evict("team-a", pods[1])
    status = wait_for(backend, lost, lambda s: s.is_terminal)
    assert status.phase is JobPhase.FAILED and pods[1] in (status.message or ""), status.message
    # (its agent still waited for node 1's in the rendezvous: the signal ends that wait too)
    wait_until(lambda: [n.jobs for p in backend.pools() for n in p.nodes if n.node == 0] == [[]], 20)
    assert pods_created(toy) == created + 1  # the Job replaced the evicted pod, which holds the pool again

    # All pods or none: node 1 busy (a wrapper started there by hand), node 0's fork is withdrawn
    # (its log and exit record removed) and the job runs cold, in pods of its own.
    wait_until(lambda: [[n.node for n in p.nodes] for p in backend.pools() if p.releases_in] == [[0, 1]])
    (pool,) = backend.pools()
    client = backend.cluster.required()
    node1 = client.get(PODS, "team-a", pool.nodes[1].step)
    request = KubeRequest.from_json(backend.store.read_record(cancelled).request)
    assert node1 is not None and pools.ask(client, node1, pools.spawn_request(cancelled, request))["ok"]
    plain = ddp_spec(workspace, nodes=2, nproc_per_node=2)
    created = pods_created(toy)
    cold = backend.submit(plain, SCRIPT)
    status = wait_for(backend, cold, lambda s: s.is_terminal)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    started = next(e.message for e in status.events if e.reason == "Started")
    assert started.startswith(f"cold: pool {pool.fingerprint}: pod {pool.nodes[1].step}: busy"), started
    assert pods_created(toy) == created + 2
    assert not any("pool pod" in ln.text for ln in backend.logs(cold))  # nothing of the withdrawn fork
    assert [n.jobs for n in backend.pools()[0].nodes] == [[], [cancelled]]

    # Release ends the whole pool: its Job and every pod (node 1's job with force).
    (pool,) = backend.pools()
    assert backend.release(pool, force=True).released
    assert backend.pools() == []
    wait_until(lambda: not list(zygote_dir().glob(f"k8s-{first}-*")))  # each pod's private dir went with it


def test_a_pytorchjob_runs_cold_and_its_dry_run_says_why(
    toy_kubeflow: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    spec = ddp_spec(workspace, options={"flavor": "pytorchjob", "keep_warm": "60"})
    text = backend.dryrun(spec).text
    assert (
        "# start: cold: pools are kept Indexed Jobs (--flavor job): a pytorchjob's pods are its operator's"
        in text
    )
    assert poolshape.POOL_LABEL not in text  # its pods are not marked kept
