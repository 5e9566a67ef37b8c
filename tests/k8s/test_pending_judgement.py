"""How long a job may wait for its pods (issue 34, item 18): only a gang scheduler's queue holds
the clock; a node being added and an image being pulled stop it and are named; an admission
refusal that no waiting fixes fails the job at once, saying what to change."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.model.specs import JobPhase

from .conftest import ddp_spec, start_toy, wait_for
from .fakeapi import (
    BATCH_JOBS,
    PYTORCHJOBS,
    priority_classes,
    quota_requires,
    restricted_pod_security,
    service_accounts,
)
from .toycluster import ToyCluster, kueue_admit

QUICK = "print('ran', flush=True)\n"


def test_a_kueue_admitted_pytorchjob_whose_pods_cannot_be_placed_times_out(
    kueue_kubeflow: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    """``schedulingPolicy.queue`` is there for a gang scheduler; with the default scheduler (the
    pods name no other) nothing holds the pods, and 16 GPUs fit no node of 8."""
    options = {"flavor": "pytorchjob", "queue": "research", "pending_timeout": "2s"}
    spec = ddp_spec(workspace, nodes=1, nproc_per_node=16, accelerator="gpu", options=options)
    job_id = backend.submit(spec, QUICK)
    kueue_admit(kueue_kubeflow.cluster, "PyTorchJob", "team-a", job_id)
    status = wait_for(backend, job_id, lambda s: s.is_terminal, timeout=60)
    assert (status.phase, status.reason) == (JobPhase.FAILED, "Unschedulable"), status.message
    assert "within 2s (--pending-timeout): master-0: 0/1 nodes are available" in (status.message or "")
    assert "Insufficient nvidia.com/gpu" in (status.message or "")


@pytest.fixture
def autoscaled(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ToyCluster]:
    """No node has a GPU until the autoscaler adds one; the image takes a while to pull."""
    yield from start_toy(
        monkeypatch, tmp_path, gpus=0, scale_up=(2.5, 8), pull_seconds={"pytorch:local": 2.5}
    )


def test_a_node_coming_and_an_image_pulling_stop_the_clock_and_are_named(
    autoscaled: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    spec = ddp_spec(workspace, nodes=1, accelerator="gpu", options={"flavor": "job", "pending_timeout": "2s"})
    job_id = backend.submit(spec, QUICK)
    seen: dict[str, str] = {}

    def note(status: Any) -> bool:
        if status.reason and status.message:
            seen.setdefault(status.reason, status.message)
        return bool(status.is_terminal)

    status = wait_for(backend, job_id, note, timeout=60)
    assert status.phase is JobPhase.SUCCEEDED, (status.message, seen)
    assert seen["WaitingForNode"].startswith("node-0: waiting for a node: pod triggered scale-up: [{gpu-pool")
    assert seen["PullingImage"] == 'node-0: pulling image "pytorch:local"'


Admission = Callable[[str, dict[str, Any]], None]
REFUSALS: list[tuple[str, Admission, dict[str, Any], str, str]] = [
    (
        "job",
        restricted_pod_security("team-a"),
        {"run_as_root": True},
        "the namespace's PodSecurity level refuses these pods: ",
        'violates PodSecurity "restricted:latest": ',
    ),
    (
        "job",
        quota_requires("team-a", "compute", ("limits.cpu", "limits.memory")),
        {},
        "the namespace's ResourceQuota needs cpu and memory requests and limits: pass --cpu and --memory: ",
        "failed quota: compute: must specify limits.cpu,limits.memory",
    ),
    (
        "pytorchjob",
        priority_classes("high"),
        {"priority_class": "urgent"},
        "no such priority class: check --priority-class: ",
        "no PriorityClass with name urgent was found",
    ),
    (
        "job",
        service_accounts("team-a", "default"),
        {"service_account": "trainer"},
        "no such service account: check --service-account: ",
        'error looking up service account team-a/trainer: serviceaccount "trainer" not found',
    ),
]


@pytest.mark.parametrize(("flavor", "admission", "options", "hint", "refusal"), REFUSALS)
def test_a_refusal_no_wait_can_fix_fails_the_job_at_once(
    toy_kubeflow: ToyCluster,
    backend: KubernetesBackend,
    workspace: Path,
    flavor: str,
    admission: Admission,
    options: dict[str, Any],
    hint: str,
    refusal: str,
) -> None:
    toy_kubeflow.cluster.admission.append(admission)
    spec = ddp_spec(workspace, nodes=1, options={"flavor": flavor, **options})  # 15m pending timeout
    job_id = backend.submit(spec, QUICK)
    status = wait_for(backend, job_id, lambda s: s.is_terminal, timeout=60)
    assert status.phase is JobPhase.FAILED and status.reason in ("FailedCreate", "FailedCreatePod")
    message = status.message or ""
    assert message.startswith(hint) and refusal in message and "\n" not in message
    assert "--pending-timeout" not in message  # failed at once, not after the 15 minutes
    workload = BATCH_JOBS if flavor == "job" else PYTORCHJOBS
    wait_for(backend, job_id, lambda s: toy_kubeflow.cluster.get(workload.key, "team-a", job_id) is None)
