"""Plain ``batch/v1`` Indexed Job plus a headless Service: no operator needed.

One pod per node, node rank = completion index; the Service gives the pods DNS names
``<job>-<index>.<job>`` so node 0 is the rendezvous host. Replicas are ``node-<index>``.
"""

from __future__ import annotations

from typing import Any

from ....specs import JobSpec
from .. import manifests as mf
from ..client import JOBS
from ..options import KubeOptions
from .base import Flavor, ReplicaGroup

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


class IndexedJob(Flavor):
    name = "job"
    resource = JOBS
    container = "trainer"
    replica_prefix = "node-"
    needs_operator = False

    def replica_groups(self, spec: JobSpec) -> list[ReplicaGroup]:
        return [ReplicaGroup("node", spec.nodes)]

    def replica_of(self, job_id: str, pod: dict[str, Any]) -> tuple[str, str, int]:
        meta = pod.get("metadata", {})
        idx = meta.get("labels", {}).get(COMPLETION_INDEX) or meta.get("annotations", {}).get(
            COMPLETION_INDEX, "0"
        )
        return f"node-{idx}", "node", int(idx)

    def hostname(self, job_id: str, role: str, index: int) -> str:
        return f"{job_id}-{index}"

    def workload_objects(
        self, spec: JobSpec, job_id: str, opts: KubeOptions, place: mf.Placement
    ) -> list[dict[str, Any]]:
        return [headless_service(job_id, place), self._job(spec, job_id, opts, place)]

    def _job(self, spec: JobSpec, job_id: str, opts: KubeOptions, place: mf.Placement) -> dict[str, Any]:
        name = mf.object_name(job_id)
        nodes = sum(g.count for g in self.replica_groups(spec))
        env: list[dict[str, Any]] = [
            {"name": "PET_NNODES", "value": str(nodes)},
            {"name": "PET_NPROC_PER_NODE", "value": str(spec.nproc_per_node)},
            {
                "name": "PET_NODE_RANK",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}},
            },
            {"name": "PET_MASTER_ADDR", "value": f"{self.hostname(name, 'node', 0)}.{name}"},
            {"name": "PET_MASTER_PORT", "value": str(mf.MASTER_PORT)},
        ]
        pod = self.pod_template(spec, job_id, opts, place, env)
        pod["spec"]["containers"][0]["ports"] = [{"name": "c10d", "containerPort": mf.MASTER_PORT}]
        pod["spec"]["subdomain"] = name
        pod["spec"]["restartPolicy"] = "Never"
        job_spec: dict[str, Any] = {
            "completionMode": "Indexed",
            "completions": nodes,
            "parallelism": nodes,
            "backoffLimit": spec.max_restarts,
            "ttlSecondsAfterFinished": 86400,
            "template": pod,
        }
        version = place.k8s_version
        if version >= (1, 26):  # podFailurePolicy beta (on by default) from 1.26, GA 1.31
            job_spec["podFailurePolicy"] = {
                "rules": [
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
                ]
            }
        if version >= (1, 31):  # successPolicy beta from 1.31, GA 1.33: done when rank 0 is done
            job_spec["successPolicy"] = {"rules": [{"succeededIndexes": "0"}]}
        if opts.queue:
            job_spec["suspend"] = True  # Kueue admits (un-suspends) queued Jobs
        return self.workload(job_id, opts, place, job_spec)


def headless_service(job_id: str, place: mf.Placement) -> dict[str, Any]:
    """Gives the Indexed Job's pods DNS names ``<job>-<index>.<job>`` before they are ready.

    It selects on our own pod labels: the Job controller's ``batch.kubernetes.io/job-name`` only
    exists from Kubernetes 1.27, and a selector that matches no pod leaves the names unresolved.
    """
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": mf.metadata(job_id, place.namespace),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": mf.labels(job_id),
            "ports": [{"name": "c10d", "port": mf.MASTER_PORT, "targetPort": mf.MASTER_PORT}],
        },
    }
