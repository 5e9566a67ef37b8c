"""Who the job's pods run as: their ``securityContext`` at pod and container level.

Pods that write the job dir on a shared PVC must run as the notebook's user: the job dir is
0700 (0750 with ``--group-access``, which lets the group read, never write). So the pods take
the notebook pod's own context, and where it names no user (Kubeflow's notebooks set only
``fsGroup``) and the job dir is on a PVC, the kernel's uid and gid: an image whose ``USER``
differs would otherwise die on ``PermissionError`` writing ``logs/<replica>.log``. Without a
notebook pod to copy (``--image`` from a laptop) the container gets the fields PodSecurity
"restricted" requires of it, which no training image needs to break; ``runAsNonRoot`` only with
a known non-root user (an image that runs as root would not start with it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ...model.specs import Volume

# The securityContext fields a job takes over from the notebook: who the processes run as (so
# files on the shared PVC keep the user's owner), and what PodSecurity "restricted" requires.
POD_SECURITY_FIELDS = (
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "fsGroup",
    "fsGroupChangePolicy",
    "supplementalGroups",
    "seccompProfile",
)
CONTAINER_SECURITY_FIELDS = (
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "allowPrivilegeEscalation",
    "capabilities",
    "seccompProfile",
)
ROOT = {"runAsUser": 0, "runAsNonRoot": False}  # --run-as-root: the container's securityContext
# What PodSecurity "restricted" asks of every container besides a non-root user.
RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


@dataclass(frozen=True)
class PodSecurity:
    """The two ``securityContext`` levels, and what the dry run says about them (if anything)."""

    pod: dict[str, Any] = field(default_factory=dict)
    container: dict[str, Any] = field(default_factory=dict)
    note: str | None = None


def kernel_ids() -> tuple[int, int]:
    """The uid and gid of this process (the notebook's kernel)."""
    return os.getuid(), os.getgid()


def pod_security(
    pod: dict[str, Any] | None,
    container: dict[str, Any],
    *,
    run_as_root: bool,
    job_dir_claim: Volume | None,
) -> PodSecurity:
    """The job's pods' security contexts: root with ``--run-as-root``; else the notebook pod's,
    or restricted container fields without one; plus the kernel's uid and gid where the job dir
    is on a PVC (``job_dir_claim``) and nothing names a user."""
    if run_as_root:
        return PodSecurity(container=dict(ROOT))
    if pod is None:
        pod_level: dict[str, Any] = {}
        container_level = {k: dict(v) if isinstance(v, dict) else v for k, v in RESTRICTED_CONTAINER.items()}
    else:
        pod_level = _pick(pod.get("spec", {}).get("securityContext"), POD_SECURITY_FIELDS)
        container_level = _pick(container.get("securityContext"), CONTAINER_SECURITY_FIELDS)
    if job_dir_claim is None:
        return PodSecurity(pod_level, container_level)
    uid, gid = kernel_ids()
    given = {**pod_level, **container_level}
    added = {k: v for k, v in (("runAsUser", uid), ("runAsGroup", gid)) if k not in given}
    if not added:
        return PodSecurity(pod_level, container_level)
    pod_level = {**pod_level, **added}
    if pod is None and uid != 0:
        pod_level["runAsNonRoot"] = True
    whose = "the notebook pod names none" if pod is not None else "there is no notebook pod to copy"
    ids = ", ".join(f"{k} {v}" for k, v in added.items())
    note = (
        f"pods run as the kernel's {ids}: the job dir is on PVC {job_dir_claim.claim!r}, which they "
        f"write, and {whose}"
    )
    return PodSecurity(pod_level, container_level, note)


def _pick(context: dict[str, Any] | None, keys: tuple[str, ...]) -> dict[str, Any]:
    given = context or {}
    return {k: given[k] for k in keys if given.get(k) is not None}
