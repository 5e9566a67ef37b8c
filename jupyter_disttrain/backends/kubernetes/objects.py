"""A job's objects in the cluster: created in the dry run's order, linked to the workload, removed.

The workload is created last and becomes the owner of the others (the cluster's garbage
collector then removes them with it); a refused create removes what was made before it.
Removing a job whose output lives only in its pods (``pods/log``) first copies that output
into the job dir.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from ...storage.store import JobRecord, JobStore
from . import manifests as mf
from .client import BY_KIND, ApiError, ClusterAccess, KubeClient
from .flavors import flavor_named
from .podlogs import keep_pod_logs
from .request import KubeRequest

log = logging.getLogger(__name__)


class JobObjects:
    """Creates and removes the objects of a job's request."""

    def __init__(self, cluster: ClusterAccess, store: JobStore) -> None:
        self.cluster = cluster
        self.store = store

    def create(self, request: KubeRequest) -> list[dict[str, Any]]:
        """Create every object of ``request`` in order; on a refusal, none is left behind.
        Returns them as created (admission webhooks may have changed them: Kueue suspends)."""
        client = self.cluster.required()
        created: list[dict[str, Any]] = []
        try:
            for obj in request.manifests:
                created.append(client.create(obj))
            _link_to_workload(client, created)
        except ApiError:
            for obj in reversed(created):  # leave nothing half-made behind
                meta = obj["metadata"]
                with contextlib.suppress(ApiError):
                    client.delete(BY_KIND[obj["kind"]], meta["namespace"], meta["name"])
            raise
        return created

    def remove(self, record: JobRecord) -> None:
        """Delete the workload (its pods go with it: propagation), then the objects created
        before it (a Service, the ConfigMap)."""
        if "namespace" not in record.backend_state:
            return  # never reached the cluster
        client = self.cluster.required()
        request = KubeRequest.from_json(record.request)
        if not request.logs_on_pvc:
            self._keep_pod_logs(client, record, request)
        workload, *others = reversed(request.manifests)
        ns = request.namespace
        client.delete(BY_KIND[workload["kind"]], ns, workload["metadata"]["name"], propagation="Foreground")
        for obj in others:
            client.delete(BY_KIND[obj["kind"]], ns, obj["metadata"]["name"])

    def _keep_pod_logs(self, client: KubeClient, record: JobRecord, request: KubeRequest) -> None:
        """Copy the pods' logs into the job dir before the pods go: they are the only copy."""
        flavor = flavor_named(request.flavor)
        try:
            kept = keep_pod_logs(client, request.namespace, record.id, flavor, self.store.logs_dir(record.id))
        except (ApiError, OSError) as exc:  # the cancel itself must still happen
            log.warning("could not keep the pod logs of job %s: %s", record.id, exc)
            return
        if kept and not record.backend_state.get("logs_kept"):
            record.backend_state["logs_kept"] = True  # from now on, logs are read from these files
            self.store.write_record(record)


def _link_to_workload(client: KubeClient, created: list[dict[str, Any]]) -> None:
    """Make the workload (created last) the owner of the other objects, so the cluster's
    garbage collector removes them with it (its TTL, a ``kubectl delete``)."""
    *others, workload = created
    owner = {"metadata": {"ownerReferences": [mf.owner_reference(workload)]}}
    for obj in others:
        meta = obj["metadata"]
        client.merge_patch(BY_KIND[obj["kind"]], meta["namespace"], meta["name"], owner)
