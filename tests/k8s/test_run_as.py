"""Who the pods run as and what they ask for, so that a real namespace admits them and they can
write the job dir (issue 34, items 17 and 18): the kernel's uid and gid where the job dir is on a
PVC and the notebook pod names no user; restricted-compliant containers where no notebook pod
is copied; the notebook container's cpu and memory in zero configuration; ``--group-access``
only for a job dir on a PVC."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend, podsecurity
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import JobPhase, JobSpec
from jupyter_disttrain.storage.store import JobStore

from .conftest import ddp_spec, wait_for
from .fakeapi import quota_requires, restricted_pod_security
from .schema_check import schema_errors, semantic_errors
from .test_zero_config import notebook_pod
from .toycluster import PODS, ToyCluster

QUICK = "print('admitted and ran', flush=True)\n"


@pytest.fixture(autouse=True)
def kernel_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel runs as jovyan (uid 1000, gid 100), as in a Kubeflow notebook image."""
    monkeypatch.setattr(podsecurity, "kernel_ids", lambda: (1000, 100))


def kubeflow_notebook(toy: ToyCluster, monkeypatch: pytest.MonkeyPatch, workspace: Path, data: Path) -> None:
    """A notebook pod as Kubeflow's controller makes it: a securityContext with fsGroup only."""
    data.mkdir(exist_ok=True)
    pod: dict[str, Any] = notebook_pod(workspace, data)
    pod["spec"]["securityContext"] = {"fsGroup": 100}
    pod["status"] = {"phase": "Running", "podIP": "10.0.0.9"}
    toy.cluster.create(PODS, "team-a", pod)
    monkeypatch.setenv("POD_NAME", "nb-alice-0")
    monkeypatch.setenv("POD_NAMESPACE", "team-a")


def zero(workspace: Path, **options: Any) -> JobSpec:
    return JobSpec(
        name="who", backend="kubernetes", working_dir=str(workspace), options={"flavor": "job", **options}
    )


def test_pods_writing_a_pvc_job_dir_run_as_the_kernels_user(
    toy: ToyCluster, monkeypatch: pytest.MonkeyPatch, workspace: Path, tmp_path: Path
) -> None:
    kubeflow_notebook(toy, monkeypatch, workspace, tmp_path / "data")
    backend = KubernetesBackend(JobStore(workspace / ".disttrain" / "jobs"))
    info = backend.dryrun(zero(workspace, group_access=True))
    job = info.request.manifests[-1]
    assert job["spec"]["template"]["spec"]["securityContext"] == {
        "fsGroup": 100,
        "runAsUser": 1000,
        "runAsGroup": 100,
    }
    assert (
        "# pods run as the kernel's runAsUser 1000, runAsGroup 100: the job dir is on PVC 'workspace-alice'"
        in info.text
    )
    assert schema_errors(job, "1.33") == [] and semantic_errors(job) == []

    # A job dir off the PVC: the pods do not write it, so nothing is added; --group-access, which
    # shares a job dir on the PVC, is refused for it.
    elsewhere = KubernetesBackend(JobStore(tmp_path / "local-jobs"))
    job = elsewhere.dryrun(zero(workspace)).request.manifests[-1]
    assert job["spec"]["template"]["spec"]["securityContext"] == {"fsGroup": 100}
    with pytest.raises(InvalidSpecError) as err:
        elsewhere.dryrun(zero(workspace, group_access=True))
    assert str(err.value).startswith("--group-access ") and "--pvc" in str(err.value)


def test_without_a_notebook_pod_a_restricted_namespace_admits_the_pods(
    toy: ToyCluster, workspace: Path
) -> None:
    toy.cluster.admission.append(restricted_pod_security("team-a"))
    backend = KubernetesBackend(JobStore(workspace / ".disttrain" / "jobs"))
    spec = ddp_spec(workspace, nodes=1, options={"flavor": "job"})  # --image, --pvc: no notebook pod
    job = backend.dryrun(spec).request.manifests[-1]
    pod = job["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsUser": 1000, "runAsGroup": 100, "runAsNonRoot": True}
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert schema_errors(job, "1.33") == []
    job_id = backend.submit(spec, QUICK)
    status = wait_for(backend, job_id, lambda s: s.is_terminal or s.reason == "FailedCreate", timeout=60)
    assert status.phase is JobPhase.SUCCEEDED, status.message


def test_zero_config_pods_ask_for_the_notebook_containers_cpu_and_memory(
    toy: ToyCluster, monkeypatch: pytest.MonkeyPatch, workspace: Path, tmp_path: Path
) -> None:
    """A namespace whose ResourceQuota needs limits admitted the notebook: it admits its jobs."""
    toy.cluster.admission.append(quota_requires("team-a", "compute", ("limits.cpu", "limits.memory")))
    kubeflow_notebook(toy, monkeypatch, workspace, tmp_path / "data")
    backend = KubernetesBackend(JobStore(workspace / ".disttrain" / "jobs"))
    info = backend.dryrun(zero(workspace))
    pod = info.request.manifests[-1]["spec"]["template"]["spec"]
    amounts = {"cpu": "4", "memory": "16Gi"}
    assert pod["containers"][0]["resources"] == {"limits": amounts, "requests": amounts}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8192Mi"}} in pod["volumes"]
    assert (
        "# resources from the notebook container: requests cpu=4,memory=16Gi; limits cpu=4,memory=16Gi"
        in info.text
    )
    flagged = backend.dryrun(dataclasses.replace(zero(workspace), cpu="2"))
    resources = flagged.request.manifests[-1]["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources == {"limits": {"cpu": "2", "memory": "16Gi"}, "requests": {"cpu": "2", "memory": "16Gi"}}
    job_id = backend.submit(zero(workspace), QUICK)
    status = wait_for(backend, job_id, lambda s: s.is_terminal, timeout=60)
    assert status.phase is JobPhase.SUCCEEDED, status.message
