"""The Kubernetes backend's launch request, typed: what ``--dry-run`` shows and ``job.json`` keeps.

``submit`` creates exactly ``manifests``, in their order (the workload last: it owns the others).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class KubeRequest:
    """The objects to create and what was decided on the way (flavour, namespace, version gates,
    accelerator, where the logs are, what came from the notebook pod)."""

    # The fields in the order of the JSON the dry run (REST) and job.json have always had.
    manifests: list[dict[str, Any]]
    flavor: str
    namespace: str
    k8s_version: str  # "1.29": the server version the Job fields were gated for
    # The pods write their output to log files of the job dir on the shared PVC (else: pods/log).
    logs_on_pvc: bool = False
    # Where the job really runs, as the local backend records it (the job list's GPUs).
    device: str = "cpu"
    device_reason: str = ""
    notebook_pod: str | None = None  # what image, mounts and accelerator came from
    # The job's roles as its launcher laid them out (``Role.to_json``); the pods are the
    # flavour's replicas (one per node, each running torchrun on the role's arguments), or one
    # per replica of a process role (a parameter server's).
    roles: list[dict[str, Any]] = field(default_factory=list)
    # The pods see the job dir on a PVC (else a scratch dir of their own: checkpoints die with them).
    job_dir_on_pvc: bool = False
    # The stall and idle guard (``monitoring.guard.GuardSettings.to_json``; the server runs it).
    guard: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KubeRequest:
        return cls(
            manifests=list(data.get("manifests", [])),
            flavor=str(data["flavor"]),
            namespace=str(data["namespace"]),
            k8s_version=str(data.get("k8s_version", "")),
            logs_on_pvc=bool(data.get("logs_on_pvc")),
            device=str(data.get("device", "cpu")),
            device_reason=str(data.get("device_reason", "")),
            notebook_pod=data.get("notebook_pod"),
            roles=list(data.get("roles", [])),
            job_dir_on_pvc=bool(data.get("job_dir_on_pvc", data.get("logs_on_pvc"))),
            guard=dict(data.get("guard") or {}),
        )
