"""Kubeflow ``PyTorchJob`` (training operator): one Master plus N-1 Workers.

The operator sets ``PET_*`` and gives each replica a Service named like its pod; replicas are
named from its labels (``master-0``, ``worker-<i>``).
"""

from __future__ import annotations

from typing import Any

from ....model.specs import JobSpec
from .. import manifests as mf
from ..client import PYTORCHJOBS
from ..options import KubeOptions
from .base import Flavor, ReplicaGroup

REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"


class PyTorchJob(Flavor):
    name = "pytorchjob"
    resource = PYTORCHJOBS

    def replica_groups(self, spec: JobSpec) -> list[ReplicaGroup]:
        return [ReplicaGroup("master", 1), ReplicaGroup("worker", spec.nodes - 1)]

    def replica_of(self, job_id: str, pod: dict[str, Any]) -> tuple[str, str, int]:
        labels = pod.get("metadata", {}).get("labels", {})
        role = labels.get(REPLICA_TYPE, "worker").lower()
        idx = int(labels.get(REPLICA_INDEX, "0"))
        return f"{role}-{idx}", role, idx

    def suspended(self, workload: dict[str, Any]) -> bool:
        # Kueue suspends Kubeflow jobs through runPolicy (the operator then makes no pods).
        return bool(workload.get("spec", {}).get("runPolicy", {}).get("suspend"))

    def gang_queue(self, workload: dict[str, Any]) -> str | None:
        queue: str | None = (
            workload.get("spec", {}).get("runPolicy", {}).get("schedulingPolicy", {}).get("queue")
        )
        return queue

    def workload_objects(
        self, spec: JobSpec, job_id: str, opts: KubeOptions, place: mf.Placement
    ) -> list[dict[str, Any]]:
        pod = self.pod_template(spec, job_id, opts, place)
        pod["spec"]["containers"][0]["ports"] = [{"name": "pytorchjob-port", "containerPort": mf.MASTER_PORT}]
        restart = self.restart_policy(spec)
        replicas = {
            g.role.capitalize(): {"replicas": g.count, "restartPolicy": restart, "template": pod}
            for g in self.replica_groups(spec)
            if g.count
        }
        run_policy: dict[str, Any] = {
            "backoffLimit": spec.max_restarts,
            "cleanPodPolicy": "None",  # finished pods stay, so their logs and exit codes stay readable
            "ttlSecondsAfterFinished": 86400,
        }
        # Read only by a gang scheduler (Volcano, scheduler-plugins); the pods' priorityClassName and
        # the Kueue label work without one.
        if opts.queue or opts.priority_class:
            run_policy["schedulingPolicy"] = {
                k: v for k, v in (("queue", opts.queue), ("priorityClass", opts.priority_class)) if v
            }
        body = {
            "nprocPerNode": str(spec.nproc_per_node),
            "runPolicy": run_policy,
            "pytorchReplicaSpecs": replicas,
        }
        return [self.workload(job_id, opts, place, body)]
