"""Zero configuration inside a notebook pod: image, namespace and PVC mounts come from the pod."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import JobPhase, JobSpec, Volume
from jupyter_disttrain.storage.store import JobStore

from .conftest import DDP_SCRIPT, start_toy, wait_for
from .schema_check import schema_errors, semantic_errors
from .toycluster import PODS, ToyCluster


def notebook_pod(workspace: Path, data: Path, gpus: int = 0) -> dict[str, Any]:
    limits = {"cpu": "4", "memory": "16Gi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
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
                    "resources": {"limits": limits, "requests": limits},
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
    assert info.request.flavor == "job" and info.request.namespace == "team-b"
    svc, job = info.request.manifests
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
    assert info.request.logs_on_pvc is True and c["workingDir"] == str(workspace)
    version = "1.33" if cluster == "toy" else "1.29"
    assert info.request.k8s_version == version  # read from the API server
    assert ("successPolicy" in job["spec"]) is (cluster == "toy")
    for obj in (svc, job):
        assert schema_errors(obj, version) == [] and semantic_errors(obj) == []

    # Flags still win: another image, and a different claim at the data path.
    spec.image = "pytorch:2.13"
    spec.volumes = [Volume("imagenet-v2", str(data), read_only=True)]
    c = backend.dryrun(spec).request.manifests[1]["spec"]["template"]["spec"]
    assert c["containers"][0]["image"] == "pytorch:2.13"
    assert sorted(
        v["persistentVolumeClaim"]["claimName"] for v in c["volumes"] if "persistentVolumeClaim" in v
    ) == [
        "imagenet-v2",
        "workspace-alice",
    ]


@pytest.fixture
def cpu_toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ToyCluster]:
    yield from start_toy(monkeypatch, tmp_path, gpus=0)  # a cluster without a single GPU


def in_notebook_pod(
    toy: ToyCluster, monkeypatch: pytest.MonkeyPatch, workspace: Path, data: Path, gpus: int
) -> KubernetesBackend:
    data.mkdir(exist_ok=True)
    toy.cluster.create(PODS, "team-a", notebook_pod(workspace, data, gpus))
    monkeypatch.setenv("POD_NAME", "nb-alice-0")
    monkeypatch.setenv("POD_NAMESPACE", "team-a")
    return KubernetesBackend(JobStore(workspace / ".disttrain" / "jobs"))


def test_a_bare_job_from_a_cpu_notebook_runs_on_a_cpu_only_cluster(
    cpu_toy: ToyCluster, monkeypatch: pytest.MonkeyPatch, workspace: Path, tmp_path: Path
) -> None:
    backend = in_notebook_pod(cpu_toy, monkeypatch, workspace, tmp_path / "data", gpus=0)
    spec = JobSpec(name="bare", backend="kubernetes", nodes=2, nproc_per_node=1, working_dir=str(workspace))
    job_id = backend.submit(spec, DDP_SCRIPT)
    status = wait_for(backend, job_id, lambda s: s.is_terminal or s.reason == "Unschedulable")
    assert status.phase is JobPhase.SUCCEEDED, status.message
    why = "the notebook container has no nvidia.com/gpu limit; pass --accelerator gpu for GPUs"
    record = backend.store.read_record(job_id)
    assert (record.request["device"], record.request["device_reason"]) == ("cpu", why)
    (c,) = record.request["manifests"][1]["spec"]["template"]["spec"]["containers"]
    assert (
        "nvidia.com/gpu" not in str(c["resources"])
        and {"name": "ACCELERATE_USE_CPU", "value": "1"} in c["env"]
    )
    assert any(e.reason == "Accelerator" and why in e.message for e in status.events)


@pytest.mark.parametrize(
    ("gpus", "accelerator", "limit", "why"),
    [
        (2, "auto", "4", "the notebook container has an nvidia.com/gpu limit (2)"),
        (0, "auto", None, "the notebook container has no nvidia.com/gpu limit"),
        (0, "gpu", "4", "--accelerator gpu"),
        (2, "cpu", None, "--accelerator cpu"),
    ],
)
def test_the_default_accelerator_follows_the_notebook_container(
    toy: ToyCluster,
    monkeypatch: pytest.MonkeyPatch,
    workspace: Path,
    tmp_path: Path,
    gpus: int,
    accelerator: str,
    limit: str | None,
    why: str,
) -> None:
    backend = in_notebook_pod(toy, monkeypatch, workspace, tmp_path / "data", gpus)
    spec = JobSpec(
        name="acc",
        backend="kubernetes",
        nproc_per_node=4,
        accelerator=accelerator,
        working_dir=str(workspace),
    )
    info = backend.dryrun(spec)
    (c,) = info.request.manifests[1]["spec"]["template"]["spec"]["containers"]
    assert c["resources"].get("limits", {}).get("nvidia.com/gpu") == limit
    assert info.request.device == ("cuda" if limit else "cpu") and why in info.request.device_reason
    shown = "4 GPU(s) per pod" if limit else "CPU processes (gloo), no GPU requested"
    assert f"# accelerator: {shown}: {why}" in info.text


def test_outside_a_pod_the_default_is_cpu(toy: ToyCluster, workspace: Path) -> None:
    backend = KubernetesBackend(JobStore(workspace / ".disttrain" / "jobs"))
    spec = JobSpec(name="laptop", backend="kubernetes", image="pytorch:local", working_dir=str(workspace))
    info = backend.dryrun(spec)
    assert info.request.device == "cpu"
    assert "no notebook pod to follow; pass --accelerator gpu for GPUs" in info.text


def with_sidecar(pod: dict[str, Any], notebook_name: str) -> dict[str, Any]:
    """The notebook container renamed, with a service-mesh sidecar injected in front of it."""
    (nb,) = pod["spec"]["containers"]
    nb["name"] = notebook_name
    proxy = {
        "name": "istio-proxy",
        "image": "docker.io/istio/proxyv2:1.22",
        "volumeMounts": [
            {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
        ],
    }
    pod["spec"]["containers"] = [proxy, nb]
    return pod


@pytest.mark.parametrize("nb_prefix", ["/notebook/team-b/alice", None])
def test_the_notebook_container_is_not_the_sidecar(
    toy: ToyCluster, monkeypatch: pytest.MonkeyPatch, workspace: Path, tmp_path: Path, nb_prefix: str | None
) -> None:
    (tmp_path / "data").mkdir()
    toy.cluster.create(
        PODS, "team-b", with_sidecar(notebook_pod(workspace, tmp_path / "data", gpus=1), "alice")
    )
    monkeypatch.setenv("POD_NAME", "nb-alice-0")
    monkeypatch.setenv("POD_NAMESPACE", "team-b")
    if nb_prefix:  # Kubeflow names the notebook container after the notebook
        monkeypatch.setenv("NB_PREFIX", nb_prefix)
    else:  # then the container that mounts the working dir
        monkeypatch.delenv("NB_PREFIX", raising=False)
    backend = KubernetesBackend(JobStore(workspace / ".disttrain" / "jobs"))
    spec = JobSpec(name="side", backend="kubernetes", working_dir=str(workspace / "project"))
    info = backend.dryrun(spec)
    pod = info.request.manifests[1]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "registry.example/team/notebook:2.1"
    assert info.request.device == "cuda"  # the notebook container's GPU, not the sidecar's none
    assert "container alice (POD_NAME nb-alice-0)" in info.request.notebook_pod


@pytest.mark.parametrize("spec_hostname", [None, "alice"])
def test_the_own_pod_is_found_by_hostname(
    toy: ToyCluster,
    monkeypatch: pytest.MonkeyPatch,
    workspace: Path,
    tmp_path: Path,
    spec_hostname: str | None,
) -> None:
    """Without POD_NAME: HOSTNAME is the pod's name cut to 63 characters (or spec.hostname)."""
    (tmp_path / "data").mkdir()
    pod = notebook_pod(workspace, tmp_path / "data")
    long_name = "jupyter-" + "alice-wonderland-" * 4 + "0"  # 77 characters
    pod["metadata"]["name"] = long_name
    if spec_hostname:
        pod["spec"]["hostname"] = spec_hostname
    toy.cluster.create(PODS, "team-b", pod)
    toy.cluster.create(
        PODS, "team-b", {**notebook_pod(workspace, tmp_path / "data"), "metadata": {"name": "other"}}
    )
    monkeypatch.delenv("POD_NAME", raising=False)
    monkeypatch.setenv("POD_NAMESPACE", "team-b")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # in a pod (the client uses the kubeconfig)
    monkeypatch.setenv("HOSTNAME", spec_hostname or long_name[:63].rstrip("-."))
    backend = KubernetesBackend(JobStore(workspace / ".disttrain" / "jobs"))
    info = backend.dryrun(JobSpec(name="host", backend="kubernetes", working_dir=str(workspace)))
    assert info.request.manifests[1]["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "registry.example/team/notebook:2.1"
    )
    assert f"pod team-b/{long_name}, container notebook (HOSTNAME" in info.request.notebook_pod
    assert f"# inherited from the notebook: pod team-b/{long_name}" in info.text


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({}, "not running in a pod (no KUBERNETES_SERVICE_HOST, no POD_NAME)"),
        ({"POD_NAME": "nb-bob-0"}, "no pod 'nb-bob-0' in namespace 'team-a'"),
        (
            {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "laptop"},
            "no pod has hostname 'laptop' in namespace 'team-a'; set POD_NAME and POD_NAMESPACE",
        ),
        (
            {"POD_NAME": "nb-alice-0"},
            "cannot read it: permission denied: this service account may not get pods",
        ),
    ],
)
def test_pass_image_says_why_the_pod_was_not_found(
    toy: ToyCluster, monkeypatch: pytest.MonkeyPatch, workspace: Path, env: dict[str, str], why: str
) -> None:
    for key in ("POD_NAME", "KUBERNETES_SERVICE_HOST", "HOSTNAME"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if "permission" in why:
        toy.cluster.denied.add(("get", "pods"))
    backend = KubernetesBackend(JobStore(workspace / ".disttrain" / "jobs"))
    spec = JobSpec(name="noimg", backend="kubernetes", working_dir=str(workspace), options={"flavor": "job"})
    with pytest.raises(InvalidSpecError) as err:
        backend.dryrun(spec)
    message = str(err.value)
    assert message.startswith("no image: pass --image (the default is the notebook pod's image, but that pod")
    assert why in message and "\n" not in message
