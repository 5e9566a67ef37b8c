"""What a Kubernetes workload kind (a "flavour") decides; the backend speaks only to this.

A flavour owns its workload object (and any object beside it), the names of its replicas (from
the spec's replica groups), how its workload says the job ended, and where its pods' output
goes. What every flavour shares — the pod, the ConfigMap, pod → replica status — lives in
``manifests`` and ``status``; a flavour adds only what is its own.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from ....launchers import get_launcher
from ....launchers.base import HELPER_ROLES, PROCESS, LaunchContext, Role
from ....model.specs import Condition, JobPhase, JobSpec, ReplicaStatus
from .. import manifests as mf
from ..client import Resource
from ..options import KubeOptions

# How a workload ended: (Succeeded or Failed, reason, message) as its object says.
End = tuple[JobPhase, "str | None", "str | None"]


def true_condition(conds: list[Condition], *types: str) -> Condition | None:
    """The first condition of one of ``types`` that holds."""
    return next((c for c in conds if c.type in types and c.status == "True"), None)


@dataclass(frozen=True)
class ReplicaGroup:
    """The pods of one role: ``count`` replicas named ``<role>-<index>`` (``single``: one
    replica, named after the role, as a parameter server's ``scheduler``)."""

    role: str
    count: int
    single: bool = False

    def name(self, index: int) -> str:
        return self.role if self.single else f"{self.role}-{index}"


def process_roles(spec: JobSpec) -> list[Role]:
    """The roles of ``spec``'s launcher that run one process per replica (a parameter server's
    scheduler, servers and workers): a pod each. Empty for launchers whose ranks torchrun starts."""
    roles = get_launcher(spec.launcher).roles(spec, LaunchContext("", cpu=True))
    return [r for r in roles if r.via == PROCESS]


class Flavor(abc.ABC):
    """One workload kind: its manifests, replica names, status mapping and log sources."""

    #: What ``--flavor`` names it.
    name: ClassVar[str]
    #: The workload's API resource (its watch, its RBAC, API discovery).
    resource: ClassVar[Resource]
    #: The training container's name (``pods/log`` reads it).
    container: ClassVar[str] = "pytorch"
    #: What the pod wrapper puts before its hostname minus the job id to name its replica.
    replica_prefix: ClassVar[str] = ""
    #: The pods run our wrapper, which writes log files and exit records into the job dir
    #: (else torchrun runs bare and the output is in ``pods/log`` only).
    runs_wrapper: ClassVar[bool] = True
    #: Served only where its operator is installed (API discovery looks for it).
    needs_operator: ClassVar[bool] = True

    # -- replicas ----------------------------------------------------------------------------
    @abc.abstractmethod
    def replica_groups(self, spec: JobSpec) -> list[ReplicaGroup]:
        """The job's replicas by role, in rank order: rank 0 runs in the first group's first."""

    @abc.abstractmethod
    def replica_of(self, job_id: str, pod: dict[str, Any]) -> tuple[str, str, int]:
        """(name, role, index) of the replica a pod runs, as its controller labels or names it."""

    def replicas(self, spec: JobSpec) -> list[ReplicaStatus]:
        """The replicas of a new job, all Pending; names match the pods' log files."""
        return [
            ReplicaStatus(name=g.name(i), role=g.role, index=i)
            for g in self.replica_groups(spec)
            for i in range(g.count)
        ]

    def rank0_replica(self, spec: JobSpec) -> str | None:
        """The replica whose exit record is the job's verdict (the first that trains, not a
        parameter server's scheduler); None when the pods leave none."""
        if not self.runs_wrapper:
            return None
        return next(r.name for r in self.replicas(spec) if r.role not in HELPER_ROLES)

    def meeting_point(self, job_id: str) -> tuple[str, int] | None:
        """Where the processes of a ``process_roles`` job find the one they meet at (a parameter
        server's scheduler): its pod's DNS name and port. None: this flavour does not run process
        roles as pods (an operator that knows only torchrun's replica types, Master/Worker)."""
        return None

    def hostname(self, job_id: str, role: str, index: int) -> str:
        """The hostname of a replica's pod (PyTorchJob: also its Service's name)."""
        return f"{job_id}-{role}-{index}"

    def last_hostname(self, job_id: str, spec: JobSpec) -> str:
        """The longest hostname of the job's pods (a group's last replica has the longest)."""
        hosts = [self.hostname(job_id, r.role, r.index) for r in self.replicas(spec)]
        return max(reversed(hosts), key=len)  # the last of the longest, as the pods are listed

    # -- manifests ---------------------------------------------------------------------------
    def manifests(
        self,
        spec: JobSpec,
        job_id: str,
        opts: KubeOptions,
        place: mf.Placement,
        payload: dict[str, bytes | str] | None = None,
    ) -> list[dict[str, Any]]:
        """Every object the job needs, in the order ``kubectl apply`` should create them.

        ``payload`` (script and side files) goes into a ConfigMap when the job dir is not on a
        shared volume; without it the ConfigMap holds a placeholder (a dry run before packaging).
        """
        mf.check_fit(spec, job_id, opts, place, self.last_hostname(job_id, spec))
        objects: list[dict[str, Any]] = []
        if place.pvc_for_job_dir is None:
            objects.append(mf.code_configmap(spec, job_id, place, payload, runtime=self.runs_wrapper))
        return objects + self.workload_objects(spec, job_id, opts, place)

    @abc.abstractmethod
    def workload_objects(
        self, spec: JobSpec, job_id: str, opts: KubeOptions, place: mf.Placement
    ) -> list[dict[str, Any]]:
        """Any object the workload needs beside it, then the workload (last: it owns them)."""

    def pod_template(
        self,
        spec: JobSpec,
        job_id: str,
        opts: KubeOptions,
        place: mf.Placement,
        env: Iterable[dict[str, Any]] = (),
        replica_prefix: str | None = None,
    ) -> dict[str, Any]:
        """The pod every flavour runs, its container named for this flavour; ``env`` first.
        ``replica_prefix``: the pod wrapper's, when not the flavour's (see ``manifests``)."""
        return mf.pod_template(
            spec,
            job_id,
            opts,
            place,
            list(env),
            container=self.container,
            replica_prefix=self.replica_prefix if replica_prefix is None else replica_prefix,
            rank0=self.rank0_replica(spec),
        )

    def workload(
        self, job_id: str, opts: KubeOptions, place: mf.Placement, spec: dict[str, Any]
    ) -> dict[str, Any]:
        """The workload object around its ``spec``."""
        return {
            "apiVersion": self.resource.api_version,
            "kind": self.resource.kind,
            "metadata": mf.workload_metadata(job_id, place.namespace, opts),
            "spec": spec,
        }

    @staticmethod
    def restart_policy(spec: JobSpec) -> str:
        """A replica's pod restarts in place while ``--max-restarts`` allows."""
        return "OnFailure" if spec.max_restarts > 0 else "Never"

    # -- status ------------------------------------------------------------------------------
    def workload_end(self, conds: list[Condition], wst: dict[str, Any]) -> End | None:
        """How the workload ended, from its conditions (and ``wst``, its status); None while not."""
        done = true_condition(conds, "Complete", "Succeeded", "Completed")
        if done:
            return JobPhase.SUCCEEDED, done.reason, done.message
        failed = true_condition(conds, "Failed")
        if failed:
            return JobPhase.FAILED, failed.reason, failed.message
        return None

    # -- queues ------------------------------------------------------------------------------
    def suspended(self, workload: dict[str, Any]) -> bool:
        """Whether the workload is held suspended (by Kueue, until its queue admits it)."""
        return False

    def gang_queue(self, workload: dict[str, Any]) -> str | None:
        """The gang scheduler's queue the workload waits in, if it names one: its pods exist but
        stay unbound until the queue lets the whole job go."""
        return None

    # -- logs --------------------------------------------------------------------------------
    def logs_on_pvc(self, place: mf.Placement) -> bool:
        """Whether the pods' output is in log files of the job dir (on the shared PVC), which
        outlive the pods; else it is read through ``pods/log``."""
        return self.runs_wrapper and place.pvc_for_job_dir is not None
