"""A job's status from the cluster: the shared informers' copies of its workload, pods and events.

Reading a status asks the API server nothing while the caches hold the objects; the workload
is read directly only when the cache has not seen it (just created, or gone). The status is
written to the job store, unless another process ended the job meanwhile (an ended job's
record is final). Here the job also ends on the cluster's account: a sibling workload that
failed, the pending timeout.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any

from ...model.specs import JobPhase, JobStatus
from ...storage.store import JobRecord, JobStore
from . import manifests as mf
from . import poolstatus
from .client import EVENTS, PODS, ApiError, ClusterAccess, KubeClient
from .exits import read_exits, status_from_exits
from .flavors import Flavor, flavor_named
from .informer import Informer, informer
from .options import KubeOptions
from .pending import QUEUED, PendingClock, note_queue, queue_hold, timed_out
from .pools import signal_job
from .request import KubeRequest
from .status import build_status, conditions_of, pods_settled

log = logging.getLogger(__name__)
# How long an ended workload waits for its pods' last status before it is final anyway.
SETTLE_SECONDS = 10.0


class Reconciler:
    """Brings a job's stored status up to date with the cluster (one per backend)."""

    def __init__(
        self,
        cluster: ClusterAccess,
        store: JobStore,
        remove: Callable[[JobRecord], None],
        resolve: Callable[[Mapping[str, Any]], KubeOptions],
    ) -> None:
        self.cluster = cluster
        self.store = store
        self._remove = remove  # deletes a job's objects (its workload, pods and the rest)
        self._resolve = resolve  # a stored spec's options, typed as the backend resolves them
        self._ended_at: dict[str, float] = {}  # job id -> when its workload's end was first seen
        self._pending = PendingClock()

    def reconcile(self, record: JobRecord, status: JobStatus) -> JobStatus:
        if status.is_terminal or "namespace" not in record.backend_state:
            return status
        client = self.cluster.optional()
        if client is None:
            return status  # nothing to ask; show the last known status
        return self._pooled(record, status, client) or self._workload(record, status, client)

    def _workload(self, record: JobRecord, status: JobStatus, client: KubeClient) -> JobStatus:
        """The status from the job's workload, its pods and their events."""
        ns, flavor = record.backend_state["namespace"], flavor_named(record.backend_state["flavor"])
        workloads = informer(client, flavor.resource, ns, mf.OUR_SELECTOR)
        pods = pods_informer(client, ns)
        events = informer(client, EVENTS, ns, None, index=_event_subject)
        for inf in (workloads, pods, events):
            inf.wait_synced()
        workload = workloads.get(mf.object_name(record.id))
        if workload is None:
            # Not in the cache: just created (the watch has not caught up) or removed behind our back.
            workload = client.get(flavor.resource, ns, mf.object_name(record.id))
            if workload is None:
                return self._gone(record, status, flavor, ns)
        own_pods = pods.indexed(record.id)
        siblings = [sib for name in _sibling_names(record, flavor) if (sib := workloads.get(name))]
        own_events = _events_of(events, record.id, [*own_pods, *siblings])
        new = build_status(status, flavor, record.id, workload, own_pods, own_events, siblings=siblings)
        if new.is_terminal and not pods_settled(own_pods):
            # The pods' watch may lag the workload's: ask for the pods now before deciding.
            selector = f"{mf.JOB_ID_LABEL}={record.id}"
            own_pods = client.list_objects(PODS, ns, selector).get("items", [])
            final = pods_settled(own_pods) or self._settle_over(record.id)
            new = build_status(status, flavor, record.id, workload, own_pods, own_events, final, siblings)
        if new.is_terminal:
            self._ended_at.pop(record.id, None)
            if not flavor.workload_end(conditions_of(workload), workload.get("status") or {}):
                self._remove_running(record)
        held = queue_hold(flavor, workload, own_pods)
        note_queue(new, held)
        if held and not new.is_terminal and not new.reason:
            new.reason, new.message = QUEUED, held
        timeout = self._resolve(record.spec.options).pending_timeout
        if self._pending.overdue(new, held, timeout):
            self._remove(record)  # pods that wait forever still hold quota and claims
            return self.write_unless_ended(timed_out(new, timeout))
        if _comparable(new) != _comparable(status):
            return self.write_unless_ended(new)
        return new

    def _pooled(self, record: JobRecord, status: JobStatus, client: KubeClient) -> JobStatus | None:
        """The status of a job forked in a pool pod (it has no workload of its own), or of one
        whose kept pod recorded its end; None for the rest."""
        ns, flavor = record.backend_state["namespace"], flavor_named(record.backend_state["flavor"])
        job_dir = self.store.job_dir(record.id)
        ended = poolstatus.ended(record, status, job_dir, flavor.rank0_replica(record.spec))
        if ended is not None:
            return self.write_unless_ended(ended)
        if not record.backend_state.get("pool_pod"):
            return None
        pods = {name: client.get(PODS, ns, name) for name in poolstatus.pool_pods_of(record.backend_state)}
        found = poolstatus.forked(status, pods)
        if found.is_terminal:  # its exit may have been written just before the pod went
            found = poolstatus.ended(record, status, job_dir, None) or found
        if found.reason == "PoolPodLost" and not status.is_terminal:
            # One node's pod went: the others' ranks are stopped, their pods stay the pool's.
            alive = [name for name, pod in pods.items() if pod is not None]
            signal_job(client, ns, alive, record.id, signal.SIGTERM)
        return self.write_unless_ended(found) if _comparable(found) != _comparable(status) else found

    def _gone(self, record: JobRecord, status: JobStatus, flavor: Flavor, ns: str) -> JobStatus:
        """The job's end once its workload is gone: its pods' exit records, else deleted."""
        gone = f"the {flavor.resource.kind} {record.id} is gone from namespace {ns}"
        exits = read_exits(self.store.job_dir(record.id))
        recorded = status_from_exits(status, flavor.rank0_replica(record.spec), exits, gone)
        if recorded is not None:  # e.g. removed by its TTL after it ended
            return self.write_unless_ended(recorded)
        return self.write_unless_ended(status.end(JobPhase.FAILED, "WorkloadDeleted", gone))

    def _remove_running(self, record: JobRecord) -> None:
        """The job ended while its workload runs on (a sibling failed: a parameter server's
        scheduler or servers): remove it, or its workers would wait for the sibling forever."""
        try:
            self._remove(record)
        except ApiError as exc:  # the verdict stands; a cancel or delete removes them later
            log.warning("could not remove the workload of ended job %s: %s", record.id, exc)

    def _settle_over(self, job_id: str) -> bool:
        first = self._ended_at.setdefault(job_id, time.monotonic())
        return time.monotonic() - first > SETTLE_SECONDS

    def write_unless_ended(self, status: JobStatus) -> JobStatus:
        """Store ``status`` unless another process (a cancel in the kernel, say) ended the job
        since we read it: an ended job's record is final."""
        current = self.store.read_status(status.job_id)
        if current is not None and current.is_terminal:
            return current
        try:
            self.store.write_status(status)
        except OSError as exc:  # a full or read-only disk: the cluster's answer still stands
            log.warning("could not record the status of job %s: %s", status.job_id, exc)
        return status


def pods_informer(client: KubeClient, namespace: str) -> Informer:
    """Our pods in ``namespace``, indexed by job id."""
    return informer(client, PODS, namespace, mf.OUR_SELECTOR, index=_job_of)


def _job_of(obj: dict[str, Any]) -> str | None:
    labels: dict[str, str] = obj.get("metadata", {}).get("labels", {})
    return labels.get(mf.JOB_ID_LABEL)


def _event_subject(event: dict[str, Any]) -> str | None:
    name: str | None = event.get("involvedObject", {}).get("name")
    return name


def _events_of(events: Informer, job_id: str, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of the job's workload, ConfigMap and ``objects`` (its pods, sibling workloads)."""
    subjects = [job_id, mf.configmap_name(job_id), *(o["metadata"]["name"] for o in objects)]
    return [e for name in subjects for e in events.indexed(name)]


def _sibling_names(record: JobRecord, flavor: Flavor) -> list[str]:
    """The names of the objects of the workload's kind created besides it (one per role)."""
    manifests = KubeRequest.from_json(record.request).manifests
    return [
        o["metadata"]["name"]
        for o in manifests[:-1]
        if o["kind"] == flavor.resource.kind and o["apiVersion"] == flavor.resource.api_version
    ]


def _comparable(status: JobStatus) -> dict[str, Any]:
    data = status.to_dict()
    data.pop("updated", None)
    return data
