"""Plain ``batch/v1`` Indexed Jobs plus a headless Service: no operator needed.

A torchrun job is one Indexed Job: one pod per node, node rank = completion index; the Service
gives the pods DNS names ``<job>-<index>.<job>`` so node 0 is the rendezvous host. Replicas are
``node-<index>``.

A job whose launcher runs one process per replica (a parameter server's scheduler, servers and
workers) is one Indexed Job per role, every pod under the same Service: the workers' Job is the
workload (named after the job; its end is the job's end), ``<job>-scheduler`` and ``<job>-server``
are its siblings (owned by it). The scheduler is reached at ``<job>-scheduler-0.<job>``; only the
workers get GPUs. Replicas are ``scheduler``, ``server-<i>``, ``worker-<i>``, as on this machine.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ....launchers.base import HELPER_ROLES, PROCESS, Role
from ....model.specs import JobSpec
from .. import manifests as mf
from ..client import JOBS
from ..options import KubeOptions
from .base import Flavor, ReplicaGroup, process_roles

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


class IndexedJob(Flavor):
    name = "job"
    resource = JOBS
    container = "trainer"
    replica_prefix = "node-"
    needs_operator = False

    def replica_groups(self, spec: JobSpec) -> list[ReplicaGroup]:
        roles = process_roles(spec)
        if roles:
            return [ReplicaGroup(r.name, r.replicas, r.single) for r in roles]
        return [ReplicaGroup("node", spec.nodes)]

    def replica_of(self, job_id: str, pod: dict[str, Any]) -> tuple[str, str, int]:
        meta = pod.get("metadata", {})
        labels = meta.get("labels", {})
        idx = labels.get(COMPLETION_INDEX) or meta.get("annotations", {}).get(COMPLETION_INDEX, "0")
        group = labels.get(mf.GROUP_LABEL, "node")  # pods made before the label: torchrun nodes
        return labels.get(mf.REPLICA_LABEL) or f"{group}-{idx}", group, int(idx)

    def hostname(self, job_id: str, role: str, index: int) -> str:
        return f"{_job_name(job_id, role)}-{index}"

    def suspended(self, workload: dict[str, Any]) -> bool:
        return bool(workload.get("spec", {}).get("suspend"))

    def meeting_point(self, job_id: str) -> tuple[str, int] | None:
        return f"{self.hostname(job_id, 'scheduler', 0)}.{mf.object_name(job_id)}", mf.PS_ROOT_PORT

    def workload_objects(
        self, spec: JobSpec, job_id: str, opts: KubeOptions, place: mf.Placement
    ) -> list[dict[str, Any]]:
        roles = [r for r in place.roles if r.via == PROCESS]
        if not roles:
            port = {"name": "c10d", "port": mf.MASTER_PORT, "targetPort": mf.MASTER_PORT}
            return [headless_service(job_id, place, port), self._job(spec, job_id, opts, place)]
        port = {"name": "ps-root", "port": mf.PS_ROOT_PORT, "targetPort": mf.PS_ROOT_PORT}
        # The workers' Job last: the workload, which owns the others.
        ordered = sorted(roles, key=lambda r: r.name not in HELPER_ROLES)
        return [headless_service(job_id, place, port)] + [
            self._role_job(spec, job_id, opts, place, role) for role in ordered
        ]

    def _role_job(
        self, spec: JobSpec, job_id: str, opts: KubeOptions, place: mf.Placement, role: Role
    ) -> dict[str, Any]:
        """One Indexed Job of a process role: a pod per replica running the script itself."""
        helper = role.name in HELPER_ROLES
        own = dataclasses.replace(place, role=role, gpu=place.gpu and not helper)
        name = _job_name(job_id, role.name)
        # The pod wrapper names its replica from its hostname, "<name>-<index>", minus the job id.
        prefix = f"={role.name}" if role.single else ("" if name != job_id else f"{role.name}-")
        pod = self.pod_template(spec, job_id, opts, own, replica_prefix=prefix)
        labels = pod["metadata"]["labels"]
        labels[mf.GROUP_LABEL] = role.name
        if role.single:
            labels[mf.REPLICA_LABEL] = role.name
        if role.name == "scheduler":
            pod["spec"]["containers"][0]["ports"] = [{"name": "ps-root", "containerPort": mf.PS_ROOT_PORT}]
        return self._indexed_job(spec, job_id, opts, place, name, role.replicas, pod)

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
        pod["metadata"]["labels"][mf.GROUP_LABEL] = "node"
        pod["spec"]["containers"][0]["ports"] = [{"name": "c10d", "containerPort": mf.MASTER_PORT}]
        return self._indexed_job(spec, job_id, opts, place, name, nodes, pod, done_at_rank0=True)

    def _indexed_job(
        self,
        spec: JobSpec,
        job_id: str,
        opts: KubeOptions,
        place: mf.Placement,
        name: str,
        count: int,
        pod: dict[str, Any],
        done_at_rank0: bool = False,
    ) -> dict[str, Any]:
        """An Indexed Job of ``count`` pods like ``pod``, named by the job's headless Service;
        ``done_at_rank0``: it succeeds when index 0 does (torchrun's rank 0), not every index."""
        pod["spec"]["subdomain"] = mf.object_name(job_id)
        pod["spec"]["restartPolicy"] = "Never"
        job_spec: dict[str, Any] = {
            "completionMode": "Indexed",
            "completions": count,
            "parallelism": count,
            "backoffLimit": spec.max_restarts,
            "ttlSecondsAfterFinished": 86400,
            "template": pod,
        }
        if place.k8s_version >= (1, 26):  # podFailurePolicy beta (on by default) from 1.26, GA 1.31
            job_spec["podFailurePolicy"] = {
                "rules": [
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
                ]
            }
        if done_at_rank0 and place.k8s_version >= (1, 31):  # successPolicy beta from 1.31, GA 1.33
            job_spec["successPolicy"] = {"rules": [{"succeededIndexes": "0"}]}
        if opts.queue:
            job_spec["suspend"] = True  # Kueue admits (un-suspends) queued Jobs
        job = self.workload(job_id, opts, place, job_spec)
        job["metadata"]["name"] = name
        return job


def _job_name(job_id: str, role: str) -> str:
    """The Job of a replica group: the job's own name for its nodes or workers (the workload),
    ``<job>-<role>`` for a parameter server's scheduler and servers."""
    return mf.object_name(job_id) if role in ("node", "worker") else f"{job_id}-{role}"


def headless_service(job_id: str, place: mf.Placement, port: dict[str, Any]) -> dict[str, Any]:
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
            "ports": [port],
        },
    }
