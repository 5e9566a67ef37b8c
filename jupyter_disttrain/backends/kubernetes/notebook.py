"""What a job inherits from the notebook's own pod: finding that pod, its notebook container,
and the decisions that follow the container (the accelerator)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .client import PODS, ApiError, KubeClient
from .manifests import under

GPU_RESOURCE = "nvidia.com/gpu"


def container_gpus(container: dict[str, Any]) -> int:
    """The container's ``nvidia.com/gpu`` limit (0 when it has none or it is not a number)."""
    limit = str((container.get("resources") or {}).get("limits", {}).get(GPU_RESOURCE, "0"))
    return int(limit) if limit.isdigit() else 0


def choose_accelerator(accelerator: str, container: dict[str, Any] | None) -> tuple[bool, str]:
    """Whether the pods get GPUs, and why (shown in the dry run and kept in the job's request).

    ``auto`` follows the notebook container: a GPU notebook gets GPU pods, anything else CPU
    processes, so a bare ``%%distrun`` schedules on a CPU-only cluster.
    """
    if accelerator == "gpu":
        return True, "--accelerator gpu"
    if accelerator == "cpu":
        return False, "--accelerator cpu"
    if container is None:
        return False, "no notebook pod to follow; pass --accelerator gpu for GPUs"
    gpus = container_gpus(container)
    if gpus:
        return True, f"the notebook container has an {GPU_RESOURCE} limit ({gpus})"
    return False, f"the notebook container has no {GPU_RESOURCE} limit; pass --accelerator gpu for GPUs"


def container_resources(container: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The notebook container's cpu and memory ``requests`` and ``limits`` (those it sets): a
    namespace whose ResourceQuota admitted it admits pods that ask the same."""
    given = container.get("resources") or {}
    out: dict[str, dict[str, str]] = {}
    for part in ("requests", "limits"):
        amounts = {k: str(v) for k, v in (given.get(part) or {}).items() if k in ("cpu", "memory")}
        if amounts:
            out[part] = amounts
    return out


# Containers that meshes, proxies and secret stores inject next to the notebook, often first.
SIDECARS = frozenset({"istio-proxy", "linkerd-proxy", "oauth2-proxy", "vault-agent", "cloud-sql-proxy"})


def pod_hostname(name: str) -> str:
    """The hostname the kubelet gives a pod without ``spec.hostname``: its name cut to 63
    characters, without a trailing '-' or '.'."""
    return name[:63].rstrip("-.")


def find_own_pod(client: KubeClient, env: Mapping[str, str]) -> tuple[dict[str, Any] | None, str]:
    """This kernel's pod and how it was found, or ``None`` and why not.

    ``POD_NAME`` (the downward API) names it; else ``HOSTNAME`` inside a pod, which is the pod's
    name only up to 63 characters (and ``spec.hostname`` when that is set), so a miss lists the
    namespace's pods and matches their hostnames.
    """
    namespace = env.get("POD_NAMESPACE") or client.default_namespace
    name, host = env.get("POD_NAME"), env.get("HOSTNAME")
    if not name and not (env.get("KUBERNETES_SERVICE_HOST") and host):
        return None, "not running in a pod (no KUBERNETES_SERVICE_HOST, no POD_NAME)"
    if not namespace:
        return None, "its namespace is unknown; set POD_NAMESPACE through the downward API"
    try:
        if name:
            pod = client.get(PODS, namespace, name)
            return (pod, f"POD_NAME {name}") if pod else (None, f"no pod {name!r} in namespace {namespace!r}")
        assert host is not None
        pod = client.get(PODS, namespace, host)
        if pod is not None:
            return pod, f"HOSTNAME {host}"
        pods = client.list_objects(PODS, namespace).get("items", [])
    except ApiError as exc:
        return None, f"cannot read it: {exc}"
    mine = [p for p in pods if (p["spec"].get("hostname") or pod_hostname(p["metadata"]["name"])) == host]
    if len(mine) == 1:
        return mine[0], f"HOSTNAME {host}, the hostname of pod {mine[0]['metadata']['name']}"
    found = "no pod has" if not mine else f"{len(mine)} pods have"
    return None, (
        f"{found} hostname {host!r} in namespace {namespace!r}; "
        "set POD_NAME and POD_NAMESPACE through the downward API"
    )


def notebook_container(
    pod: dict[str, Any], working_dir: str | None, env: Mapping[str, str]
) -> dict[str, Any]:
    """The notebook's container: named by ``NB_PREFIX`` (Kubeflow: ``/notebook/<ns>/<name>``),
    else the one that mounts the working dir, else the first that is not a known sidecar."""
    containers: list[dict[str, Any]] = pod.get("spec", {}).get("containers") or [{}]
    prefix = env.get("NB_PREFIX", "").rstrip("/")
    by_name = next((c for c in containers if prefix and c.get("name") == prefix.rsplit("/", 1)[-1]), None)
    if by_name is not None or len(containers) == 1:
        return by_name or containers[0]
    if working_dir:
        depths = [_mount_depth(c, working_dir) for c in containers]
        best = max(depths)
        if best and depths.count(best) == 1:
            return containers[depths.index(best)]
    return next((c for c in containers if c.get("name") not in SIDECARS), containers[0])


def _mount_depth(container: dict[str, Any], path: str) -> int:
    """How deep the container's mount that holds ``path`` is (0: none; ``/`` does not count)."""
    roots = [m["mountPath"].rstrip("/") for m in container.get("volumeMounts") or []]
    return max((len(r) for r in roots if r and under(path, r)), default=0)
