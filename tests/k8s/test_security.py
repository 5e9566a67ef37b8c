"""Pods inherit the notebook pod's securityContext (issue 10, item 8): a namespace that enforces
PodSecurity "restricted" admits them, and their files on the PVC keep the user's owner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.model.specs import JobPhase, JobSpec
from jupyter_disttrain.storage.store import JobStore

from .conftest import DDP_SCRIPT, wait_for
from .fakeapi import restricted_pod_security
from .schema_check import _pod_specs as pod_specs
from .schema_check import schema_errors, semantic_errors
from .test_zero_config import notebook_pod
from .toycluster import PODS, ToyCluster

POD_CONTEXT = {
    "runAsUser": 1000,
    "runAsGroup": 100,
    "fsGroup": 100,
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_CONTEXT = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def restricted_notebook(
    toy: ToyCluster, monkeypatch: pytest.MonkeyPatch, workspace: Path, data: Path
) -> None:
    """team-a enforces "restricted"; the notebook pod meets it (the same hook admits it)."""
    toy.cluster.admission.append(restricted_pod_security("team-a"))
    pod: dict[str, Any] = notebook_pod(workspace, data)
    pod["metadata"]["namespace"] = "team-a"
    pod["status"] = {"phase": "Running", "podIP": "10.0.0.9"}
    pod["spec"]["securityContext"] = {**POD_CONTEXT, "sysctls": []}  # sysctls: not ours to copy
    pod["spec"]["containers"][0]["securityContext"] = {**CONTAINER_CONTEXT, "readOnlyRootFilesystem": False}
    data.mkdir(exist_ok=True)
    toy.cluster.create(PODS, "team-a", pod)
    monkeypatch.setenv("POD_NAME", "nb-alice-0")
    monkeypatch.setenv("POD_NAMESPACE", "team-a")


def spec(workspace: Path, **options: Any) -> JobSpec:
    return JobSpec(
        name="secure",
        backend="kubernetes",
        nodes=1,
        nproc_per_node=1,
        working_dir=str(workspace),
        options={"flavor": "job", **options},
    )


def test_a_restricted_namespace_admits_pods_with_the_notebooks_security_context(
    toy: ToyCluster, monkeypatch: pytest.MonkeyPatch, workspace: Path, tmp_path: Path
) -> None:
    restricted_notebook(toy, monkeypatch, workspace, tmp_path / "data")
    backend = KubernetesBackend(JobStore(workspace / ".disttrain" / "jobs"))
    job_id = backend.submit(spec(workspace), DDP_SCRIPT)
    status = wait_for(backend, job_id, lambda s: s.is_terminal or s.reason == "FailedCreate", timeout=60)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    (pod,) = [p for p in toy.cluster.items(PODS, "team-a") if p["metadata"]["name"].startswith(job_id)]
    assert pod["spec"]["securityContext"] == POD_CONTEXT
    assert pod["spec"]["containers"][0]["securityContext"] == CONTAINER_CONTEXT
    # Every flavour carries both levels, and stays valid against the real schemas.
    for flavor in ("job", "pytorchjob", "t9k"):
        workload = backend.dryrun(spec(workspace, flavor=flavor)).request.manifests[-1]
        for pod_spec in pod_specs(workload):
            assert pod_spec["securityContext"] == POD_CONTEXT
            assert pod_spec["containers"][0]["securityContext"] == CONTAINER_CONTEXT
        assert semantic_errors(workload) == []
        if flavor != "t9k":  # T9k's CRD is not public
            assert schema_errors(workload, "1.33") == []


def test_run_as_root_opts_out_and_a_restricted_namespace_says_why(
    toy: ToyCluster, monkeypatch: pytest.MonkeyPatch, workspace: Path, tmp_path: Path
) -> None:
    restricted_notebook(toy, monkeypatch, workspace, tmp_path / "data")
    backend = KubernetesBackend(JobStore(workspace / ".disttrain" / "jobs"))
    job = backend.dryrun(spec(workspace, run_as_root=True)).request.manifests[-1]
    pod = job["spec"]["template"]["spec"]
    assert "securityContext" not in pod and pod["containers"][0]["securityContext"] == {
        "runAsUser": 0,
        "runAsNonRoot": False,
    }
    assert schema_errors(job, "1.33") == []
    job_id = backend.submit(spec(workspace, run_as_root=True), DDP_SCRIPT)
    status = wait_for(backend, job_id, lambda s: s.reason == "FailedCreate", timeout=60)
    assert 'violates PodSecurity "restricted:latest"' in (status.message or "")
    assert "runAsUser=0" in (status.message or "")
    backend.cancel(job_id)


def test_without_a_notebook_pod_the_container_meets_restricted(toy: ToyCluster, workspace: Path) -> None:
    backend = KubernetesBackend(JobStore(workspace / ".disttrain" / "jobs"))
    outside = spec(workspace)
    outside.image = "pytorch:local"  # no notebook pod: the image decides who runs
    pod = backend.dryrun(outside).request.manifests[-1]["spec"]["template"]["spec"]
    assert "securityContext" not in pod  # no job dir on a PVC: no user of the pods' own
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
