"""The status of a job that forked in a warm pool's pod, and of a job whose pods are kept as one
(docs/warm-start.md "Kubernetes pools"): both end when their pod wrapper's exit record says so
(the pod runs on, holding the pool); a forked job whose pool pod went without one failed, and
its status names the pod."""

from __future__ import annotations

from typing import Any

from ...model.specs import Event, JobPhase, JobStatus, now_iso
from ...storage.store import JobRecord
from .exits import read_exits, status_from_exits
from .poolshape import POOL_LABEL
from .request import KubeRequest


def pool_pods_of(state: dict[str, Any]) -> list[str]:
    """The pool pods a forked job runs in, in node order (a job forked before pools had several
    nodes names its one pod only as ``pool_pod``)."""
    return list(state.get("pool_pods") or [state["pool_pod"]])


def kept_pool(record: JobRecord) -> str | None:
    """The pool key the job's own pods are kept as (``--keep-warm``), if any."""
    manifests = KubeRequest.from_json(record.request).manifests
    template = manifests[-1].get("spec", {}).get("template", {}) if manifests else {}
    return template.get("metadata", {}).get("labels", {}).get(POOL_LABEL)


def ended(record: JobRecord, status: JobStatus, job_dir: Any, rank0: str | None) -> JobStatus | None:
    """The final status once rank 0's wrapper recorded its exit, for a pooled job; else None."""
    pod = record.backend_state.get("pool_pod")
    exits = read_exits(job_dir)
    if pod:
        where = f"the job ran in pool pod {pod}"
        rank0 = record.backend_state.get("replica", rank0)
        stopped = exits.get(rank0 or "", {}).get("signal")
        if stopped:  # not a cancel (that ends the status first): the pool pod went under it
            return lost(status, f"pool pod {pod} was released or deleted while the job ran in it ({stopped})")
    elif pool := kept_pool(record):
        where = f"its pod is kept warm as pool {pool}"
    else:
        return None
    clean = exits.get(rank0 or "", {}).get("exit_code") == 0
    if clean and any(rep.name not in exits for rep in status.replicas):
        return None  # the other nodes' records follow: their agents leave the exit barrier together
    final = status_from_exits(status, rank0, exits, where)
    return _started(final) if pod and final is not None else final


def lost(status: JobStatus, message: str) -> JobStatus:
    """The job failed because its pool pod went: the status says which."""
    new = JobStatus.from_dict(status.to_dict())
    new.end(JobPhase.FAILED, "PoolPodLost", message)
    for rep in new.replicas:
        if not rep.phase.is_terminal:
            rep.phase, rep.reason = JobPhase.FAILED, "PoolPodLost"
    new.events.append(Event(now_iso(), "Warning", "PoolPodLost", message))
    return new


def forked(status: JobStatus, pods: dict[str, dict[str, Any] | None]) -> JobStatus:
    """A forked job's status while no exit is recorded: running while each of its pool pods
    (name → the pod, None once deleted) runs, failed naming the first one gone (deleted,
    evicted, ended)."""
    for name, pod in pods.items():
        phase = (pod or {}).get("status", {}).get("phase")
        if pod is None or pod["metadata"].get("deletionTimestamp") or phase != "Running":
            why = "was deleted" if pod is None or pod["metadata"].get("deletionTimestamp") else f"is {phase}"
            return lost(status, f"pool pod {name} {why} while the job ran in it, with no exit recorded")
    new = JobStatus.from_dict(status.to_dict())
    if new.phase is JobPhase.PENDING:
        new.phase = JobPhase.RUNNING
        nodes = [(pod or {}).get("spec", {}).get("nodeName") for pod in pods.values()]
        for i, rep in enumerate(new.replicas):
            rep.phase, rep.node, rep.ready = JobPhase.RUNNING, nodes[min(i, len(nodes) - 1)], True
    return _started(new)


def _started(status: JobStatus) -> JobStatus:
    """A forked job started when it was forked (its Started event), and so did each of its
    replicas, as a cold pod's container starts: the times its views show, seen running or not."""
    forked_at = next((e.time for e in status.events if e.reason == "Started"), None)
    status.start_time = status.start_time or forked_at or now_iso()
    for rep in status.replicas:
        rep.start_time = rep.start_time or status.start_time
    return status
