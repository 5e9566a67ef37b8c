"""CPU and memory of a job's pods from the cluster's metrics API (``metrics.k8s.io``, served by
metrics-server), for jobs whose job dir is not on a shared PVC and so have no samples of their own.

Each ``PodMetrics`` is one reading per pod (usage over the metrics-server's window); the server
answers one sample per pod per request, and a poller with ``since`` builds the series. A reading
is named after its pod, and carries the pod's labels but not its annotations: its replica is
that of the pod (from the pod cache), since before 1.28 a Job's completion index is only in the
pods' annotations.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ...model.specs import iso_seconds
from ...payloads.monitoring import ReplicaResources, Resources, ResourceSample
from .client import ApiError, KubeClient, Resource
from .flavors.base import Flavor

POD_METRICS = Resource("metrics.k8s.io", "v1beta1", "pods", "PodMetrics")
_CPU = re.compile(r"(?P<num>[0-9.]+)(?P<unit>[num]?)")
_CPU_UNITS = {"": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_MEM = re.compile(r"(?P<num>[0-9.]+)(?P<unit>Ki|Mi|Gi|Ti|k|M|G|T)?")
_MEM_UNITS = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
# A Go duration as metav1.Duration serialises it: "1m0s", "15.007s", "1h2m3.5s", "500ms".
_GO_PART = re.compile(r"([0-9]*\.?[0-9]+)(h|ms|us|µs|ns|m|s)")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
NOT_SERVED = (
    "this cluster does not serve metrics.k8s.io (no metrics-server), so there is no CPU or memory "
    "per pod; put the job dir on a shared PVC (--pvc) and the pods sample their own ranks"
)


def cpu_percent(quantity: str) -> float:
    """A CPU usage quantity (``"250m"``, ``"1234567n"``, ``"2"``) as percent of one core."""
    m = _CPU.fullmatch(quantity)
    return round(100 * float(m.group("num")) * _CPU_UNITS[m.group("unit")], 1) if m else 0.0


def memory_bytes(quantity: str) -> int:
    """A memory quantity (``"123456Ki"``, ``"2Gi"``, ``"1000000"``) in bytes."""
    m = _MEM.fullmatch(quantity)
    return int(float(m.group("num")) * _MEM_UNITS[m.group("unit")]) if m else 0


def go_duration(text: str) -> float:
    """Seconds of a Go duration (``"1m0s"`` → 60); 0 for what is not one."""
    parts = _GO_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return 0.0
    return sum(float(n) * _GO_UNITS[u] for n, u in parts)


def sample_of(metrics: dict[str, Any]) -> ResourceSample:
    """One ``PodMetrics`` as a sample: its containers' usage summed (no threads or I/O there)."""
    usage = [c.get("usage", {}) for c in metrics.get("containers", [])]
    t = metrics.get("timestamp")
    return ResourceSample(
        t=iso_seconds(t) if isinstance(t, str) else 0.0,
        cpu_percent=round(sum(cpu_percent(str(u.get("cpu", "0"))) for u in usage), 1),
        rss_bytes=sum(memory_bytes(str(u.get("memory", "0"))) for u in usage),
        threads=0,
        read_bytes=0,
        write_bytes=0,
    )


def pod_resources(
    client: KubeClient,
    namespace: str,
    selector: str,
    job_id: str,
    flavor: Flavor,
    ended: bool,
    since: float | None,
    now: float,
    pods: Mapping[str, dict[str, Any]],
) -> Resources:
    """The job's pods' current usage, one sample each, keyed by replica name. ``pods``: the
    job's pods by name, whose replicas the readings are."""
    try:
        answer = client.request(
            "GET",
            POD_METRICS.path(namespace),
            query={"labelSelector": selector},
            resource=POD_METRICS,
            namespace=namespace,
        )
    except ApiError as exc:
        message = NOT_SERVED if exc.status in (404, 503) else f"no pod metrics: {exc}"
        return Resources(0.0, now, None, message, {})
    replicas: dict[str, ReplicaResources] = {}
    items = answer.get("items", [])
    for item in items:
        meta = item.get("metadata", {})
        pod = pods.get(meta.get("name", "")) or {"metadata": meta}  # not cached yet: its labels
        name, _, _ = flavor.replica_of(job_id, pod)
        sample = sample_of(item)
        samples = [sample] if since is None or sample.t > since else []
        replicas[name] = ReplicaResources(samples, ended, None, None, False)
    interval = go_duration(str(items[0].get("window", ""))) if items else 0.0
    return Resources(interval, now, "metrics.k8s.io", None, replicas)
