"""Dry runs of every flavour, validated offline against the real schemas; no cluster involved."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.kubernetes import manifests as mf
from jupyter_disttrain.backends.kubernetes.flavors import BY_NAME
from jupyter_disttrain.backends.kubernetes.options import FLAVORS as FLAG_CHOICES
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import JobSpec, Volume
from jupyter_disttrain.storage.store import JobStore

from .schema_check import schema_errors, semantic_errors

FLAVORS = ["job", "pytorchjob", "t9k"]
VERSIONS = ["1.27", "1.31", "1.33"]


def test_every_flavor_choice_has_a_strategy() -> None:
    """``--flavor``'s choices (light: the magic's flags load them) name the strategies, in order."""
    assert tuple(BY_NAME) == FLAG_CHOICES == tuple(FLAVORS)


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No kubeconfig and not in a pod: a dry run must not need either."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    for var in ("KUBERNETES_SERVICE_HOST", "POD_NAME", "POD_NAMESPACE"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def backend(tmp_path: Path) -> KubernetesBackend:
    return KubernetesBackend(JobStore(tmp_path / "ws" / ".disttrain" / "jobs"))


def make_spec(tmp_path: Path, flavor: str, version: str = "1.33", **kw: object) -> JobSpec:
    base: dict = dict(
        name="mnist-ddp",
        backend="kubernetes",
        nodes=3,
        nproc_per_node=4,
        image="nvcr.io/nvidia/pytorch:24.05-py3",
        cpu="16",
        memory="64Gi",
        volumes=[
            Volume("shared-workspace", str(tmp_path / "ws")),
            Volume("datasets", "/data", read_only=True),
        ],
        working_dir=str(tmp_path / "ws" / "project"),
        env={"NCCL_DEBUG": "WARN", "ODD": "$(HOME) stays literal"},
        max_restarts=0,
        accelerator="gpu",  # no notebook pod to follow here: GPUs are asked for
        args=["--epochs", "1"],
        options={
            "flavor": flavor,
            "namespace": "team-a",
            "k8s_version": version,
            "node_selector": ["gpu-type=a100"],
            "tolerations": ["dedicated=ml:NoSchedule"],
            "priority_class": "high",
            "queue": "research",
        },
    )
    base.update(kw)
    return JobSpec(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_object_passes_schema_and_semantic_checks(
    backend: KubernetesBackend, tmp_path: Path, flavor: str, version: str
) -> None:
    info = backend.dryrun(make_spec(tmp_path, flavor, version), job_id="mnist-ddp-ab12c")
    objects = info.request.manifests
    assert list(yaml.safe_load_all(info.text)) == objects  # the printed YAML is exactly the request
    kinds = [o["kind"] for o in objects]
    assert (
        kinds
        == {"job": ["Service", "Job"], "pytorchjob": ["PyTorchJob"], "t9k": ["PyTorchTrainingJob"]}[flavor]
    )
    for obj in objects:
        assert semantic_errors(obj) == [], obj["kind"]
        if obj["kind"] != "PyTorchTrainingJob":  # T9k publishes no CRD: semantic checks only
            assert schema_errors(obj, version) == [], obj["kind"]
        assert obj["metadata"]["labels"][mf.MANAGED_BY] == mf.MANAGER
        assert obj["metadata"]["labels"][mf.JOB_ID_LABEL] == "mnist-ddp-ab12c"


def test_validators_can_fail() -> None:
    """The checks above would catch real mistakes (typos, wrong types, enums)."""
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"clusterIp": "None"}}
    assert schema_errors(svc, "1.33")
    pj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "x"},
        "spec": {"nprocPerNode": 4, "runPolicy": {}, "pytorchReplicaSpecs": {}},
    }
    assert schema_errors(pj, "1.33")
    pj["spec"]["nprocPerNode"] = "4"
    pj["spec"]["runPolicy"] = {"cleanPodPolicy": "Sometimes"}
    assert semantic_errors(pj)


def test_job_fields_are_gated_by_server_version(backend: KubernetesBackend, tmp_path: Path) -> None:
    old = backend.dryrun(make_spec(tmp_path, "job", "1.25"), job_id="mnist-ddp-ab12c").request.manifests[1]
    new = backend.dryrun(make_spec(tmp_path, "job", "1.33"), job_id="mnist-ddp-ab12c").request.manifests[1]
    assert "successPolicy" not in old["spec"] and "podFailurePolicy" not in old["spec"]
    assert new["spec"]["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    assert schema_errors(old, "1.25") == []
    # The gate matters: the 1.29 schema refuses successPolicy.
    assert schema_errors(new, "1.29")


def test_pod_contract(backend: KubernetesBackend, tmp_path: Path) -> None:
    info = backend.dryrun(make_spec(tmp_path, "job"), job_id="mnist-ddp-ab12c")
    svc, job = info.request.manifests
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    job_dir = str(tmp_path / "ws" / ".disttrain" / "jobs" / "mnist-ddp-ab12c")
    assert env["DISTTRAIN_JOB_DIR"] == job_dir and env["DISTTRAIN_JOB_ID"] == "mnist-ddp-ab12c"
    assert env["DISTTRAIN_TENSORBOARD_DIR"] == job_dir + "/tensorboard"
    assert env["DISTTRAIN_CHECKPOINT_DIR"] == job_dir + "/checkpoints"
    assert env["PYTHONUNBUFFERED"] == "1" and env["PET_NNODES"] == "3" and env["PET_NPROC_PER_NODE"] == "4"
    assert (
        env["PET_MASTER_ADDR"]
        == "mnist-ddp-ab12c-0.mnist-ddp-ab12c"
        == f"{job['metadata']['name']}-0.{svc['metadata']['name']}"
    )
    assert env["ODD"] == "$$(HOME) stays literal"  # the kubelet would expand $(HOME) otherwise
    assert "ACCELERATE_USE_CPU" not in env  # GPU pods: Accelerate finds CUDA itself
    assert env["PL_TRAINER_DEVICES"] == "4" and env["PL_TRAINER_NUM_NODES"] == "3"  # Lightning's defaults
    assert c["resources"]["limits"] == {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"}
    assert c["resources"]["requests"] == c["resources"]["limits"]
    assert c["workingDir"] == str(tmp_path / "ws" / "project")
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "32768Mi"}  # half of 64Gi
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    claims = [v["persistentVolumeClaim"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [
        {"claimName": "shared-workspace", "readOnly": False},
        {"claimName": "datasets", "readOnly": True},
    ]
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    assert pod["nodeSelector"] == {"gpu-type": "a100"} and pod["priorityClassName"] == "high"
    assert {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    # The user's values reach the pod as argv of a constant wrapper, never inside a shell string.
    assert c["command"][:6] == [*mf.PYTHON_LAUNCH, "-c", mf.POD_WRAPPER]
    assert c["command"][6:] == [
        job_dir + "/logs", job_dir + "/exits", "node-", "mnist-ddp-ab12c", "node-0",
        job_dir + "/disttrain-runtime.zip", "--",
        "torchrun", "--tee", "3", job_dir + "/train.py", "--epochs", "1",
    ]  # fmt: skip
    assert info.request.logs_on_pvc is True


def test_cpu_accelerator_and_restarts(backend: KubernetesBackend, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "pytorchjob", accelerator="cpu", max_restarts=2, memory=None)
    pj = backend.dryrun(spec, job_id="mnist-ddp-ab12c").request.manifests[0]
    master = pj["spec"]["pytorchReplicaSpecs"]["Master"]
    assert master["restartPolicy"] == "OnFailure" and pj["spec"]["runPolicy"]["backoffLimit"] == 2
    assert pj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    c = master["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in c["resources"]["limits"]
    assert {"name": "ACCELERATE_USE_CPU", "value": "1"} in c["env"]  # same as local CPU jobs
    spec.env = {"ACCELERATE_USE_CPU": "0"}  # the user's --env wins
    c = backend.dryrun(spec, job_id="mnist-ddp-ab12c").request.manifests[0]["spec"]["pytorchReplicaSpecs"]
    env = [
        e
        for e in c["Master"]["template"]["spec"]["containers"][0]["env"]
        if e["name"] == "ACCELERATE_USE_CPU"
    ]
    assert env == [{"name": "ACCELERATE_USE_CPU", "value": "0"}]
    shm = next(v for v in master["template"]["spec"]["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory"}  # no memory limit given: bounded by the node


def test_configmap_when_job_dir_is_not_on_a_volume(backend: KubernetesBackend, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "job", volumes=[Volume("datasets", "/data", read_only=True)])
    info = backend.dryrun(spec, job_id="mnist-ddp-ab12c")
    cm, _, job = info.request.manifests
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "mnist-ddp-ab12c-code"
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["workingDir"] == mf.CODE_DIR and c["command"][6:8] == ["-", "-"]  # logs via pods/log
    assert "/disttrain/code/train.py" in c["command"]
    assert info.request.logs_on_pvc is False
    for obj in info.request.manifests:
        assert schema_errors(obj, "1.33") == [] and semantic_errors(obj) == []


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"flavor": "volcano"}, "--flavor 'volcano'"),
        ({"shm_size": "64 GiB"}, "--shm-size"),
        ({"tolerations": ["gpu:Sometimes"]}, "--toleration"),
        ({"node_selector": ["a100"]}, "--node-selector"),
        ({"namespace": "Team_A"}, "--namespace"),
        ({"colour": "blue"}, "unknown Kubernetes option 'colour'"),
        ({"shm_size": "128Gi"}, "larger than --memory"),
        ({"pending_timeout": "soon"}, "--pending-timeout 'soon' is not a duration"),
        ({"colocate": "yes"}, "--colocate is a switch"),
        ({"colocate": True}, "--colocate needs the notebook pod's node"),
    ],
)
def test_bad_options_give_one_line_errors(
    backend: KubernetesBackend, tmp_path: Path, options: dict, fragment: str
) -> None:
    spec = make_spec(tmp_path, "job")
    spec.options = {"flavor": "job", **options}
    with pytest.raises(InvalidSpecError) as err:
        backend.dryrun(spec)
    assert fragment in str(err.value) and "\n" not in str(err.value)
    assert not backend.store.ids()  # nothing was created


def test_dry_run_without_flavor_or_image_needs_a_cluster(backend: KubernetesBackend, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "job")
    spec.options = {}
    # what is missing is in the request (a 400 over REST), not an unreachable cluster
    with pytest.raises(InvalidSpecError, match=r"^no flavor: pass --flavor \(job, pytorchjob, t9k\)"):
        backend.dryrun(spec)
    spec = make_spec(tmp_path, "job", image=None)
    with pytest.raises(InvalidSpecError, match="--image"):
        backend.dryrun(spec)


def test_importing_the_backend_does_not_import_kubernetes() -> None:
    import subprocess
    import sys

    code = (
        "import sys, jupyter_disttrain, jupyter_disttrain.backends as b; b.backend_class('kubernetes'); "
        "print('kubernetes' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
