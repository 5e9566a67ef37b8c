"""Launchers on Kubernetes: a DeepSpeed job's pods run torchrun on the DeepSpeed arguments with the
shipped config, for every flavour, validated offline against the real schemas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.kubernetes.podscript import PYTHON_LAUNCH
from jupyter_disttrain.launchers.base import Role
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import Volume
from jupyter_disttrain.storage.store import JobStore

from .schema_check import schema_errors, semantic_errors
from .test_manifests import FLAVORS, VERSIONS, make_spec

DS_ARGS = ["--deepspeed", "--deepspeed_config", "ds.json"]


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))  # a dry run needs none
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@pytest.fixture
def backend(tmp_path: Path) -> KubernetesBackend:
    return KubernetesBackend(JobStore(tmp_path / "ws" / ".disttrain" / "jobs"))


def _script_and_args(container: dict) -> list[str]:
    """What torchrun runs in the pod: after the wrapper's torchrun words, or after the entry
    script in T9k's container args (its controller runs torchrun on them)."""
    if "args" in container:
        assert container["args"][: len(PYTHON_LAUNCH)] == list(PYTHON_LAUNCH)
        return container["args"][len(PYTHON_LAUNCH) :]
    command = container["command"]
    return command[command.index("torchrun") + 3 :]


def _containers(objects: list[dict]) -> list[dict]:
    """Every pod template's training container in the workload."""
    found = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "containers" in node:
                found.extend(node["containers"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk([o for o in objects if o["kind"] != "ConfigMap"])
    return found


@pytest.fixture
def ds_json(tmp_path: Path) -> dict:
    config = {"train_batch_size": 8, "zero_optimization": {"stage": 2}}
    project = tmp_path / "ws" / "project"
    project.mkdir(parents=True)
    (project / "ds.json").write_text(json.dumps(config))
    return config


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_deepspeed_job_runs_the_same_command_in_every_pod(
    backend: KubernetesBackend,
    tmp_path: Path,
    ds_json: dict,
    flavor: str,
    version: str,
) -> None:
    spec = make_spec(tmp_path, flavor, version, launcher="deepspeed", args=DS_ARGS)
    info = backend.dryrun(spec, job_id="ds-cifar-ab12c")
    job_dir = str(tmp_path / "ws" / ".disttrain" / "jobs" / "ds-cifar-ab12c")
    for obj in info.request.manifests:
        assert semantic_errors(obj) == [], obj["kind"]
        if obj["kind"] != "PyTorchTrainingJob":  # T9k publishes no CRD: semantic checks only
            assert schema_errors(obj, version) == [], obj["kind"]
    containers = _containers(info.request.manifests)
    assert containers  # one per replica spec (Master and Worker for the operators)
    assert '"disttrain.io/role": "worker"' in json.dumps(info.request.manifests)  # each pod's role
    for c in containers:
        assert _script_and_args(c) == [
            job_dir + "/train.py", "--deepspeed", "--deepspeed_config", job_dir + "/ds_config.json"
        ]  # fmt: skip
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["MPLBACKEND"] == "Agg"
        # The user's cache beside the job dirs on the shared PVC: ops compile once, not per job.
        assert env["TORCH_EXTENSIONS_DIR"] == str(
            tmp_path / "ws" / ".disttrain" / "jobs" / ".cache" / "torch_extensions"
        )
    (role,) = [Role.from_json(r) for r in info.request.roles]
    assert (role.name, role.replicas, role.args) == ("worker", 12, _script_and_args(containers[0])[1:])
    assert {r.role for r in backend._initial_replicas(spec, info.request)} <= {"node", "master", "worker"}


def test_without_a_shared_volume_the_config_ships_in_the_configmap(
    backend: KubernetesBackend,
    tmp_path: Path,
    ds_json: dict,
) -> None:
    spec = make_spec(
        tmp_path,
        "job",
        launcher="deepspeed",
        args=DS_ARGS,
        volumes=[Volume("datasets", "/data", read_only=True)],
    )
    info = backend.dryrun(spec, job_id="ds-cifar-ab12c", script="import deepspeed\n")
    cm = info.request.manifests[0]
    assert cm["kind"] == "ConfigMap" and json.loads(cm["data"]["ds_config.json"]) == ds_json
    (c,) = _containers(info.request.manifests)
    assert c["command"][-1] == "/disttrain/code/ds_config.json"
    assert "TORCH_EXTENSIONS_DIR" not in {e["name"] for e in c["env"]}  # no cache outlives the pod
    for obj in info.request.manifests:
        assert schema_errors(obj, "1.33") == [] and semantic_errors(obj) == []


def test_a_bad_deepspeed_config_is_refused_before_any_manifest(
    backend: KubernetesBackend,
    tmp_path: Path,
) -> None:
    project = tmp_path / "ws" / "project"
    project.mkdir(parents=True)
    (project / "ds.json").write_text("{not json")
    spec = make_spec(tmp_path, "job", launcher="deepspeed", args=DS_ARGS)
    with pytest.raises(InvalidSpecError, match=r"DeepSpeed config 'ds\.json' is not valid JSON"):
        backend.dryrun(spec, job_id="ds-cifar-ab12c")
