"""Resource samples on Kubernetes: the pods sample their own ranks into the job dir on the PVC;
without a PVC the cluster's metrics API gives CPU and memory per pod, and its absence is said."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.kubernetes.podmetrics import (
    NOT_SERVED,
    cpu_percent,
    go_duration,
    memory_bytes,
)
from jupyter_disttrain.model.errors import BackendError
from jupyter_disttrain.storage.store import JobStore

from .conftest import ddp_spec, start_toy, wait_for
from .toycluster import PODS, ToyCluster

MB = 1 << 20
HOLD = """
import os, time
held = bytearray(150 * 1024 * 1024)
held[::4096] = b"1" * len(held[::4096])
for i in range(600):
    print(f"step {i}", flush=True)
    time.sleep(0.2)
"""


@pytest.fixture
def toy_metrics(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ToyCluster]:
    yield from start_toy(monkeypatch, tmp_path, pod_metrics=True)


def until(check: Callable[[], Any], what: str) -> Any:
    # Two toy pods each start torch and a sampler: 120 s was missed by 0.3 s once on a loaded
    # 2-core CI machine; the check itself is unchanged
    deadline = time.monotonic() + 240
    while not (value := check()):
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.3)
    return value


def test_pods_sample_their_ranks_into_the_job_dir_on_the_pvc(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    job_id = backend.submit(ddp_spec(workspace, nodes=2, options={"flavor": "job"}), HOLD)
    try:

        def sampled():  # type: ignore[no-untyped-def]
            answer = backend.resources(job_id)
            ranks = answer.replicas
            full = sorted(ranks) == ["rank-0", "rank-1"] and all(len(r.samples) >= 2 for r in ranks.values())
            return answer if full else None

        answer = until(sampled, "samples of both ranks")
        assert answer.source == "sampler" and answer.message is None
        for rank in answer.replicas.values():
            assert max(s.rss_bytes for s in rank.samples) >= 150 * MB
            assert all(s.gpus is None and s.gpu_mem_bytes is None for s in rank.samples)  # no GPU here
            assert rank.last_output is not None and not rank.quiet  # the pod's log, noted by its sampler
        record, status = backend.store.read_record(job_id), backend.describe(job_id)
        assert status.phase.value == "Running"
        assert backend.quiet(record, status) == []  # the job list's flag, from the same series: both print
        since = answer.now
        newer = until(lambda: backend.resources(job_id, since).replicas["rank-0"].samples, "newer samples")
        assert all(s.t > since for s in newer)
    finally:
        backend.cancel(job_id)


def test_without_a_pvc_cpu_and_memory_come_from_the_metrics_api(
    toy_metrics: ToyCluster, workspace: Path, tmp_path: Path
) -> None:
    backend = KubernetesBackend(JobStore(tmp_path / "local-jobs"))  # not shared: no job dir in the pods
    job_id = backend.submit(ddp_spec(workspace, nodes=1, options={"flavor": "job"}), HOLD)
    try:
        wait_for(backend, job_id, lambda s: s.replicas_ready == 1)

        def holding():  # type: ignore[no-untyped-def]
            answer = backend.resources(job_id)
            pod = answer.replicas.get("node-0")
            return answer if pod and pod.samples and pod.samples[0].rss_bytes >= 150 * MB else None

        answer = until(holding, "node-0's memory in the pod metrics")
        assert answer.source == "metrics.k8s.io" and answer.interval == 10.0
        (sample,) = answer.replicas["node-0"].samples
        assert sample.cpu_percent >= 0 and sample.threads == 0  # the metrics API has no threads
        assert backend.resources(job_id, since=sample.t).replicas["node-0"].samples == []
    finally:
        backend.cancel(job_id)


@pytest.fixture
def old_toy_metrics(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ToyCluster]:
    """Kubernetes 1.27: the Job controller's completion-index label is new in 1.28 (the pods
    have it as an annotation only, which PodMetrics do not copy)."""
    yield from start_toy(monkeypatch, tmp_path, version=(1, 27), pod_metrics=True)


def test_pod_metrics_are_each_pods_replica_on_1_27_and_their_window_is_a_go_duration(
    old_toy_metrics: ToyCluster, workspace: Path, tmp_path: Path
) -> None:
    old_toy_metrics.cluster.metrics_window = 60.0  # metrics-server answers "1m0s"
    backend = KubernetesBackend(JobStore(tmp_path / "local-jobs"))
    job_id = backend.submit(ddp_spec(workspace, nodes=2, options={"flavor": "job"}), HOLD)
    try:
        wait_for(backend, job_id, lambda s: s.replicas_ready == 2)

        def both_pods():  # type: ignore[no-untyped-def]
            answer = backend.resources(job_id)
            return answer if sum(len(r.samples) for r in answer.replicas.values()) == 2 else None

        answer = until(both_pods, "a reading of each pod")
        assert sorted(answer.replicas) == ["node-0", "node-1"] and answer.interval == 60.0
    finally:
        backend.cancel(job_id)


def test_metrics_servers_windows_as_go_prints_them() -> None:
    assert [go_duration(w) for w in ("1m0s", "30s", "1h2m3.5s", "500ms", "15.007s", "1h0m0s")] == [
        60.0,
        30.0,
        3723.5,
        0.5,
        15.007,
        3600.0,
    ]
    assert go_duration("1.5us") == 1.5e-6 and go_duration("soon") == 0.0


def test_a_cluster_without_the_metrics_api_is_said(toy: ToyCluster, workspace: Path, tmp_path: Path) -> None:
    backend = KubernetesBackend(JobStore(tmp_path / "local-jobs"))
    job_id = backend.submit(ddp_spec(workspace, nodes=1, options={"flavor": "job"}), "print('hi')\n")
    answer = backend.resources(job_id)
    assert answer.source is None and answer.message == NOT_SERVED and answer.replicas == {}


def test_quantities_as_metrics_server_writes_them() -> None:
    assert cpu_percent("250m") == 25.0
    assert cpu_percent("1500000000n") == 150.0
    assert cpu_percent("2") == 200.0
    assert memory_bytes("123456Ki") == 123456 * 1024
    assert memory_bytes("2Gi") == 2 * 2**30
    assert memory_bytes("1000000") == 1000000


STUCK = """
import time
def stuck_here():
    time.sleep(600)
print("stuck", flush=True)
stuck_here()
"""


def test_stack_through_pods_exec_and_a_clear_message_without_the_grant(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    job_id = backend.submit(ddp_spec(workspace, nodes=1, options={"flavor": "job"}), STUCK)
    try:
        wait_for(backend, job_id, lambda s: any("stuck" in ln.text for ln in backend.logs(job_id)))
        dump = backend.stack(job_id, "node-0")
        assert dump.method == "py-spy" and "==== rank-0 (pid " in dump.text
        assert "stuck_here" in dump.text, dump.text
        toy.cluster.denied.add(("get", "pods/exec"))  # an exec websocket is a GET
        with pytest.raises(BackendError, match=r"may not get pods/exec .* grant pods/exec"):
            backend.stack(job_id, "node-0")
    finally:
        backend.cancel(job_id)


def inject_vault_agent(kind: str, obj: dict[str, Any]) -> None:
    """A mutating webhook (Vault's agent injector) that adds a sidecar to every pod of ours."""
    if kind == "Pod" and "disttrain.io/job-id" in obj["metadata"].get("labels", {}):
        obj["spec"]["containers"].append({"name": "vault-agent", "image": "hashicorp/vault:1.15"})


def test_stacks_and_logs_name_their_container_beside_an_injected_sidecar(
    toy: ToyCluster, workspace: Path, tmp_path: Path
) -> None:
    """The API server answers 400 to pods/exec and pods/log of a pod with two containers that
    name none: both say which."""
    toy.cluster.admission.append(inject_vault_agent)
    backend = KubernetesBackend(JobStore(tmp_path / "local-jobs"))  # logs through pods/log too
    job_id = backend.submit(ddp_spec(workspace, nodes=1, options={"flavor": "job"}), STUCK)
    try:
        wait_for(backend, job_id, lambda s: any("stuck" in ln.text for ln in backend.logs(job_id)))
        (pod,) = [
            p for p in toy.cluster.items(PODS) if p["metadata"]["labels"]["disttrain.io/job-id"] == job_id
        ]
        assert [c["name"] for c in pod["spec"]["containers"]] == ["trainer", "vault-agent"]
        assert "stuck_here" in backend.stack(job_id, "node-0").text
    finally:
        backend.cancel(job_id)
