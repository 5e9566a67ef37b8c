"""Where a Kubernetes job's ranks run now, for the views that reach into them through
``pods/exec`` (stacks, the debugger, a diagnosis): the job's own pods, newest per replica, or,
for a job forked in a warm pool (docs/warm-start.md "Kubernetes pools"), the pool's pods. A pool
pod runs one job at a time, beside the pool server and its zygote: each view picks this job's
processes and sockets by the job's id and its own job dir, never by what the pod's environment
says (that is the first job's, the one whose pod was kept)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...runtime import contract
from ...storage.store import JobRecord
from .client import PODS, KubeClient
from .flavors import flavor_named
from .podlogs import newest_per_replica
from .poolstatus import pool_pods_of
from .reconcile import pods_informer


@dataclass(frozen=True)
class RankPods:
    """The job's namespace, its training container, its pods by replica, and its job dir as the
    pods see it (expanded in the pod: ``$DISTTRAIN_JOB_DIR`` is the pod's own variable)."""

    namespace: str
    container: str
    pods: dict[str, dict[str, Any]]
    job_dir: str


def rank_pods(client: KubeClient, record: JobRecord, job_dir: str) -> RankPods:
    """The pods that run ``record``'s ranks now (``job_dir``: the store's, where a pooled job's
    dir is: pools hold jobs whose job dir is on the shared PVC, at the same path in the pod)."""
    state = record.backend_state
    ns, flavor = state["namespace"], flavor_named(state["flavor"])
    if state.get("pool_pod"):  # each pool pod runs the job's replica of its own node
        found = [client.get(PODS, ns, name) for name in pool_pods_of(state)]
        pods = {flavor.replica_of(record.id, pod)[0]: pod for pod in found if pod is not None}
        return RankPods(ns, flavor.container, pods, job_dir)
    informer = pods_informer(client, ns)
    informer.wait_synced()
    pods = newest_per_replica(informer.indexed(record.id), record.id, flavor)
    return RankPods(ns, flavor.container, pods, f"${contract.JOB_DIR_ENV}")
