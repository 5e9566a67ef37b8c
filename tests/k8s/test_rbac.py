"""deploy/rbac.yaml is valid and is all the backend needs: a full job lifecycle under that Role."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.model.errors import BackendError
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore
from tests.test_horovod_entry import _free_port, horovod_src  # noqa: F401  (fixture)

from .conftest import ddp_spec, start_toy, wait_for
from .schema_check import schema_errors
from .test_resources import STUCK
from .test_zero_config import notebook_pod
from .toycluster import PODS, ToyCluster

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"


def under_the_role(
    toy: ToyCluster, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> KubernetesBackend:
    """A backend in a notebook pod whose service account has exactly deploy/rbac.yaml's Role."""
    toy.cluster.create(PODS, "team-a", notebook_pod(workspace, tmp_path))
    toy.cluster.grant_role(next(yaml.safe_load_all(RBAC.read_text())))
    monkeypatch.setenv("POD_NAME", "nb-alice-0")
    monkeypatch.setenv("POD_NAMESPACE", "team-a")
    return KubernetesBackend(JobStore(workspace / ".disttrain" / "jobs"))


def test_rbac_yaml_validates() -> None:
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    assert [d["kind"] for d in docs] == ["Role", "RoleBinding"]
    for version in ("1.27", "1.33"):
        for doc in docs:
            assert schema_errors(doc, version) == []


def test_a_job_lifecycle_needs_nothing_more(
    toy: ToyCluster, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = under_the_role(toy, workspace, tmp_path, monkeypatch)
    spec = ddp_spec(workspace, nodes=1, image=None, accelerator="cpu", options={})
    job_id = backend.submit(spec, "print('hello from the pod')\n")
    status = wait_for(backend, job_id, lambda s: s.is_terminal)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    assert any("hello from the pod" in ln.text for ln in backend.pod_logs(job_id))
    assert toy.cluster.refusals == []  # every request so far was allowed by the Role
    # The Role is what decides: without its pods/log rule, reading logs fails naming both.
    assert toy.cluster.grants is not None
    toy.cluster.grants.discard(("", "pods/log", "get"))
    with pytest.raises(BackendError, match="may not get pods/log in namespace 'team-a'"):
        list(backend.pod_logs(job_id))
    backend.delete(job_id)
    assert backend.store.is_deleted(job_id)
    assert toy.cluster.refusals == [("", "pods/log", "get")]


@pytest.fixture(params=[(1, 33), (1, 35)], ids=["1.33", "1.35"])
def versioned_toy(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[ToyCluster]:
    yield from start_toy(monkeypatch, tmp_path, version=request.param)


def test_stacks_under_the_role_and_a_refusal_names_the_verb(
    versioned_toy: ToyCluster, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exec websocket is a GET: the API server authorises it as get on pods/exec, and from
    1.35 as create too; the Role grants both, and a refusal says which one is missing."""
    toy, backend = versioned_toy, under_the_role(versioned_toy, workspace, tmp_path, monkeypatch)
    spec = ddp_spec(workspace, nodes=1, image=None, accelerator="cpu", options={"flavor": "job"})
    job_id = backend.submit(spec, STUCK)
    try:
        wait_for(backend, job_id, lambda s: any("stuck" in ln.text for ln in backend.logs(job_id)))
        assert "stuck_here" in backend.stack(job_id, "node-0").text
        assert toy.cluster.refusals == []
        grants = toy.cluster.grants
        assert grants is not None
        for verb in ("get", "create"):
            grants.discard(("", "pods/exec", verb))
            if (verb, toy.cluster.version) == ("create", (1, 33)):  # before 1.35 get is enough
                assert "stuck_here" in backend.stack(job_id, "node-0").text
            else:
                with pytest.raises(BackendError) as err:
                    backend.stack(job_id, "node-0")
                message = str(err.value)
                assert f"may not {verb} pods/exec in namespace 'team-a'" in message, message
                assert "grant pods/exec verbs get and create" in message and "\n" not in message
            grants.add(("", "pods/exec", verb))
    finally:
        backend.cancel(job_id)


# Every replica says it is up, then waits in a function a stack dump names.
UP_AND_WAITING = """
import os, time
def waiting_here():
    time.sleep(600)
print("up as", os.environ.get("DMLC_ROLE") or "rank " + os.environ["RANK"], flush=True)
waiting_here()
"""
NOTEBOOK_IMAGE = "registry.example/team/notebook:2.1"  # notebook_pod's: the pods inherit it


def _launch(launcher: str, workspace: Path) -> dict[str, Any]:
    """The spec fields that make a job of ``launcher`` (none of them needs its library to start)."""
    if launcher == "deepspeed":
        (workspace / "project" / "ds.json").write_text(json.dumps({"train_batch_size": 2}))
        return {"nodes": 2, "launcher": "deepspeed", "args": ["--deepspeed_config", "ds.json"]}
    if launcher == "mxnet":
        return {"nodes": 1, "launcher": "mxnet", "launcher_options": {"servers": 1, "workers": 2}}
    if launcher == "horovod":  # a port of its own (tests run side by side); gloo on loopback
        env = {"HOROVOD_GLOO_RENDEZVOUS_PORT": str(_free_port()), "GLOO_SOCKET_IFNAME": "lo"}
        return {"nodes": 2, "launcher": "horovod", "env": env}
    return {"nodes": 2}


@pytest.fixture
def launcher_toy(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[tuple[str, ToyCluster]]:
    """A launcher's name and the toy cluster its pods run on (with Horovod's runner in the image
    for Horovod, as an image with Horovod has it)."""
    launcher, image_env = request.param, {}
    if launcher == "horovod":
        image_env = {NOTEBOOK_IMAGE: {"PYTHONPATH": request.getfixturevalue("horovod_src")}}
    for toy in start_toy(monkeypatch, tmp_path, image_env=image_env):
        yield launcher, toy


@pytest.mark.parametrize("launcher_toy", ["torchrun", "deepspeed", "mxnet", "horovod"], indirect=True)
def test_every_launchers_lifecycle_needs_nothing_more(
    launcher_toy: tuple[str, ToyCluster], workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Submit, status, logs, a stack dump and cancel of each launcher's job, every request
    allowed by the Role: an MXNet job's sibling Jobs are linked to its workload by a patch."""
    launcher, toy = launcher_toy
    backend = under_the_role(toy, workspace, tmp_path, monkeypatch)
    spec = ddp_spec(workspace, image=None, accelerator="cpu", options={}, **_launch(launcher, workspace))
    job_id = backend.submit(spec, UP_AND_WAITING)
    replicas = {r.name for r in backend.describe(job_id).replicas}
    assert len(replicas) == (4 if launcher == "mxnet" else 2)

    def all_up(_: object) -> bool:
        return {ln.replica for ln in backend.logs(job_id) if "up as" in ln.text} == replicas

    status = wait_for(backend, job_id, all_up)
    assert status.phase is JobPhase.RUNNING, status.message
    for replica in sorted(replicas)[:1] + sorted(replicas)[-1:]:
        assert "waiting_here" in backend.stack(job_id, replica).text
    assert backend.cancel(job_id).phase is JobPhase.CANCELLED
    assert toy.cluster.refusals == []  # every request was allowed by the Role
