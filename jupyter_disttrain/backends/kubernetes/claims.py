"""Whether the job's PVCs can be mounted by pods on several nodes, checked before submitting.

Zero configuration mounts the notebook's claims, and a notebook's home is often ReadWriteOnce:
the second node's pod would then wait forever on a Multi-Attach error. A claim whose access
modes cannot be read (no permission, not found) is left to the cluster, whose warnings and the
pending timeout then say what went wrong.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...model.errors import InvalidSpecError
from ...model.specs import Volume
from .client import PVCS, ApiError, KubeClient

SINGLE_NODE = ("ReadWriteOnce", "ReadWriteOncePod")


def access_modes(client: KubeClient, namespace: str, claim: str) -> list[str] | None:
    """The claim's ``spec.accessModes``, or ``None`` when they cannot be read."""
    try:
        pvc = client.get(PVCS, namespace, claim)
    except ApiError:
        return None
    return list((pvc or {}).get("spec", {}).get("accessModes") or []) or None


def check_claims(
    client: KubeClient,
    namespace: str,
    volumes: Iterable[Volume],
    pods: int,
    colocate: bool,
    *,
    why: str,
    one_pod: str | None = None,
) -> None:
    """Refuse a job of several pods whose claim only one node (or one pod) can mount. ``why``
    says what makes it ``pods`` pods (``--nodes 2``); ``one_pod`` is the flag that makes it one,
    if there is one (an MXNet job has a pod per replica whatever its flags)."""
    if pods < 2:
        return
    for v in volumes:
        modes = access_modes(client, namespace, v.claim)
        if modes is None or "ReadWriteMany" in modes or not set(modes) & set(SINGLE_NODE):
            continue
        if "ReadOnlyMany" in modes and v.read_only:  # read-only mounts may use the claim's ROX mode
            continue
        rwx = f"mount a ReadWriteMany claim there: --pvc CLAIM:{v.mount_path}"
        if "ReadWriteOncePod" in modes:
            ways = f"{one_pod}, or {rwx}" if one_pod else rwx
            raise InvalidSpecError(
                f"{why}: PVC {v.claim!r} at {v.mount_path} is ReadWriteOncePod (one pod only); use {ways}"
            )
        if not colocate:
            fewer = f"{one_pod}, " if one_pod else ""
            raise InvalidSpecError(
                f"{why}: PVC {v.claim!r} at {v.mount_path} is ReadWriteOnce (one node only); "
                f"use {fewer}--colocate (every pod on the notebook's node), or {rwx}"
            )
