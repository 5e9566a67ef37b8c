"""Zero configuration inside a notebook pod: image, namespace and PVC mounts come from the pod."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.specs import JobSpec, Volume
from jupyter_disttrain.store import JobStore

from .conftest import start_toy
from .schema_check import schema_errors, semantic_errors
from .toycluster import PODS, ToyCluster


def notebook_pod(workspace: Path, data: Path) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nb-alice-0", "labels": {"app": "notebook"}},
        "spec": {
            "serviceAccountName": "default-editor",
            "imagePullSecrets": [{"name": "regcred"}],
            "containers": [
                {
                    "name": "notebook",
                    "image": "registry.example/team/notebook:2.1",
                    "volumeMounts": [
                        {"name": "home", "mountPath": str(workspace)},
                        {"name": "datasets", "mountPath": str(data), "readOnly": True},
                        {"name": "dshm", "mountPath": "/dev/shm"},
                        {
                            "name": "kube-api-access",
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        },
                    ],
                }
            ],
            "volumes": [
                {"name": "home", "persistentVolumeClaim": {"claimName": "workspace-alice"}},
                {"name": "datasets", "persistentVolumeClaim": {"claimName": "imagenet", "readOnly": True}},
                {"name": "dshm", "emptyDir": {"medium": "Memory"}},
                {"name": "kube-api-access", "projected": {"sources": []}},
            ],
        },
    }


@pytest.fixture
def old_toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ToyCluster]:
    yield from start_toy(monkeypatch, tmp_path, version=(1, 29))


@pytest.mark.parametrize("cluster", ["toy", "old_toy"])
def test_job_inherits_the_notebook_pod(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    workspace: Path,
    tmp_path: Path,
    cluster: str,
) -> None:
    toy: ToyCluster = request.getfixturevalue(cluster)
    data = tmp_path / "data"
    data.mkdir()
    toy.cluster.create(PODS, "team-b", notebook_pod(workspace, data))
    monkeypatch.setenv("POD_NAME", "nb-alice-0")  # the downward API
    monkeypatch.setenv("POD_NAMESPACE", "team-b")
    backend = KubernetesBackend(JobStore(workspace / ".disttrain" / "jobs"))
    spec = JobSpec(name="zero", backend="kubernetes", nodes=2, nproc_per_node=4, working_dir=str(workspace))

    info = backend.dryrun(spec)  # no --image, --pvc, --namespace or --flavor
    assert info.request["flavor"] == "job" and info.request["namespace"] == "team-b"
    svc, job = info.request["manifests"]
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == "registry.example/team/notebook:2.1"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    mounts = {m["mountPath"]: (m["readOnly"]) for m in c["volumeMounts"] if m["name"].startswith("pvc-")}
    assert mounts == {str(workspace): False, str(data): True}
    claims = sorted(
        v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v
    )
    assert claims == ["imagenet", "workspace-alice"]
    assert info.request["logs_on_pvc"] is True and c["workingDir"] == str(workspace)
    version = "1.33" if cluster == "toy" else "1.29"
    assert info.request["k8s_version"] == version  # read from the API server
    assert ("successPolicy" in job["spec"]) is (cluster == "toy")
    for obj in (svc, job):
        assert schema_errors(obj, version) == [] and semantic_errors(obj) == []

    # Flags still win: another image, and a different claim at the data path.
    spec.image = "pytorch:2.13"
    spec.volumes = [Volume("imagenet-v2", str(data), read_only=True)]
    c = backend.dryrun(spec).request["manifests"][1]["spec"]["template"]["spec"]
    assert c["containers"][0]["image"] == "pytorch:2.13"
    assert sorted(
        v["persistentVolumeClaim"]["claimName"] for v in c["volumes"] if "persistentVolumeClaim" in v
    ) == [
        "imagenet-v2",
        "workspace-alice",
    ]
