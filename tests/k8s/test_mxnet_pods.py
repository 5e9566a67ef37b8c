"""``--launcher mxnet`` on Kubernetes: a pod per replica, one Indexed Job per role under the job's
headless Service, the scheduler reached by its DNS name. The manifests are validated against the
real schemas; the control loop runs through the real client against the toy cluster, where the
pods are local processes: a real MXNet ``dist_sync`` job (in its own venv), a failed server, a
cancel."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.kubernetes.manifests import PS_ROOT_PORT
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import JobPhase, JobSpec, Volume
from jupyter_disttrain.monitoring.resources import sampled_replicas
from jupyter_disttrain.storage.store import JobStore
from tests.test_mxnet_job import KV_CELL, REPLICAS

from .conftest import wait_for
from .fakeapi import BATCH_JOBS
from .schema_check import schema_errors, semantic_errors
from .toycluster import PODS, ToyCluster

JOB = "ps-ab12c"
MX_IMAGE = "mxnet:1.9.1"


def ps_spec(workspace: Path, **kw: Any) -> JobSpec:
    options = {"namespace": "team-a", "flavor": "job", **kw.pop("options", {})}
    base: dict[str, Any] = dict(
        name="ps",
        backend="kubernetes",
        image=MX_IMAGE,
        launcher="mxnet",
        launcher_options={"servers": 1, "workers": 2},
        volumes=[Volume("workspace", str(workspace))],
        working_dir=str(workspace / "project"),
        options=options,
    )
    base.update(kw)
    return JobSpec(**base)


def _env(container: dict[str, Any]) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container["env"]}


@pytest.fixture(autouse=True)
def no_cluster_unless_toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A dry run needs none; the toy fixture (set up after this one) points KUBECONFIG at itself.
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@pytest.mark.parametrize("version", ["1.25", "1.29", "1.33"])
def test_a_pod_per_replica_one_job_per_role_and_the_scheduler_behind_the_service(
    backend: KubernetesBackend, workspace: Path, version: str
) -> None:
    spec = ps_spec(workspace, accelerator="gpu", options={"k8s_version": version})
    info = backend.dryrun(spec, job_id=JOB)
    for obj in info.request.manifests:
        assert schema_errors(obj, version) == [] and semantic_errors(obj) == [], obj["kind"]
    service, *jobs = info.request.manifests  # the job dir is on the PVC: no ConfigMap
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    # The workers' Job is the workload, last: it owns the others and its end is the job's.
    assert [(j["metadata"]["name"], j["spec"]["completions"]) for j in jobs] == [
        (f"{JOB}-scheduler", 1),
        (f"{JOB}-server", 1),
        (JOB, 2),
    ]
    job_dir = str(workspace / ".disttrain" / "jobs" / JOB)
    for job, role in zip(jobs, ["scheduler", "server", "worker"], strict=True):
        pod = job["spec"]["template"]
        (container,) = pod["spec"]["containers"]
        assert pod["spec"]["subdomain"] == service["metadata"]["name"] == JOB
        assert pod["metadata"]["labels"]["disttrain.io/role"] == role
        # No torchrun: the wrapper runs the script with the image's own python.
        assert container["command"][-4:] == ["--", "{python}", "-u", f"{job_dir}/train.py"]
        env = _env(container)
        assert env["DMLC_ROLE"] == role and env["DMLC_USE_KUBERNETES"] == "1"
        assert env["DMLC_PS_ROOT_URI"] == f"{JOB}-scheduler-0.{JOB}"  # the scheduler pod's DNS name
        assert (env["DMLC_PS_ROOT_PORT"], env["DMLC_NUM_SERVER"], env["DMLC_NUM_WORKER"]) == (
            str(PS_ROOT_PORT),
            "1",
            "2",
        )
        assert "DMLC_NODE_HOST" not in env and env["DISTTRAIN_JOB_ID"] == JOB
        gpus = container["resources"].get("limits", {}).get("nvidia.com/gpu")
        assert gpus == ("1" if role == "worker" else None)  # the scheduler and servers train nothing
    assert jobs[0]["spec"]["template"]["spec"]["containers"][0]["ports"] == [
        {"name": "ps-root", "containerPort": PS_ROOT_PORT}
    ]
    replicas = backend._initial_replicas(spec, info.request)
    assert [(r.name, r.role) for r in replicas] == [(n, n.split("-")[0]) for n in REPLICAS]


def test_without_a_flavor_it_runs_as_plain_jobs_and_an_operator_flavour_is_refused(
    backend: KubernetesBackend, workspace: Path
) -> None:
    spec = ps_spec(workspace, options={"flavor": None})
    assert backend.dryrun(spec, job_id=JOB).request.flavor == "job"  # no cluster asked
    for flavor in ("pytorchjob", "t9k"):
        with pytest.raises(InvalidSpecError) as err:
            backend.dryrun(ps_spec(workspace, options={"flavor": flavor}), job_id=JOB)
        assert "use --flavor job" in str(err.value) and "\n" not in str(err.value)


def test_a_queue_is_refused_it_would_admit_each_roles_job_on_its_own(
    backend: KubernetesBackend, workspace: Path
) -> None:
    with pytest.raises(InvalidSpecError) as err:
        backend.dryrun(ps_spec(workspace, options={"queue": "research"}), job_id=JOB)
    message = str(err.value)
    assert message.startswith("--queue research: --launcher mxnet runs one Job per role")
    assert "leave out --queue" in message and "\n" not in message


def test_the_longest_hostname_counts_whichever_role_has_it(
    backend: KubernetesBackend, workspace: Path
) -> None:
    job_id = "a" * 45 + "-b12cd"  # "<id>-scheduler-0" is 63 characters; "<id>-server-0" fits anyway
    backend.dryrun(ps_spec(workspace), job_id=job_id)
    with pytest.raises(InvalidSpecError, match="-scheduler-0' has 64 characters"):
        backend.dryrun(ps_spec(workspace), job_id="a" + job_id)


def _phase_of(backend: KubernetesBackend, job_id: str) -> list[tuple[str, str, JobPhase]]:
    return [(r.name, r.role, r.phase) for r in backend.describe(job_id).replicas]


def _objects(toy: ToyCluster, job_id: str) -> list[str]:
    """The job's Jobs and pods still in the cluster."""
    return sorted(
        f"{kind}/{o['metadata']['name']}"
        for kind, key in (("Job", BATCH_JOBS.key), ("Pod", PODS))
        for o in toy.cluster.items(key)
        if o["metadata"].get("labels", {}).get("disttrain.io/job-id") == job_id
    )


@pytest.fixture
def mx_toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mxnet_python: str) -> Any:
    from .conftest import start_toy

    path = os.path.dirname(mxnet_python) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")
    yield from start_toy(monkeypatch, tmp_path, image_paths={MX_IMAGE: path})


def test_dist_sync_across_scheduler_server_and_worker_pods(
    mx_toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    job_id = backend.submit(ps_spec(workspace), "SHAPE = (2, 3)\n" + KV_CELL)
    status = wait_for(backend, job_id, lambda s: s.is_terminal, timeout=240)
    lines = {(ln.replica, ln.text) for ln in backend.logs(job_id)}
    assert status.phase is JobPhase.SUCCEEDED, (status.to_dict(), sorted(lines))
    pulled = sorted(text for replica, text in lines if text.startswith("worker "))
    assert pulled == ["worker 0 of 2 pulled 18", "worker 1 of 2 pulled 18"]
    assert {replica for replica, text in lines if text.startswith("worker ")} == {"worker-0", "worker-1"}
    assert _phase_of(backend, job_id) == [(n, n.split("-")[0], JobPhase.SUCCEEDED) for n in REPLICAS]


# Replicas that would wait for a peer forever, and one that fails: no MXNet needed.
WAITING = """
import os, sys, time
if os.environ["DMLC_ROLE"] == os.environ.get("FAIL_ROLE"):
    sys.exit("the {} gives up".format(os.environ["DMLC_ROLE"]))
print("waiting as", os.environ["DMLC_ROLE"], flush=True)
time.sleep(120)
"""


def test_a_failed_server_fails_the_job_and_removes_the_waiting_pods(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    spec = ps_spec(workspace, image="pytorch:local", env={"FAIL_ROLE": "server"})
    job_id = backend.submit(spec, WAITING)
    status = wait_for(backend, job_id, lambda s: s.is_terminal, timeout=120)
    assert status.phase is JobPhase.FAILED
    assert status.message and status.message.startswith(f"Job {job_id}-server failed: ")
    assert "replica server-0 failed: Error (exit code 1): the server gives up" in status.message
    phases = {name: phase for name, _, phase in _phase_of(backend, job_id)}
    assert phases["server-0"] is JobPhase.FAILED and phases["worker-0"] is not JobPhase.SUCCEEDED
    wait_for(backend, job_id, lambda s: _objects(toy, job_id) == [], timeout=60)
    logs = {(ln.replica, ln.text) for ln in backend.logs(job_id)}
    assert ("worker-1", "waiting as worker") in logs and ("scheduler", "waiting as scheduler") in logs


@pytest.mark.parametrize("on_pvc", [True, False])
def test_cancel_removes_every_roles_job_and_pods_and_keeps_each_replicas_log(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path, on_pvc: bool
) -> None:
    # Without the PVC the script ships in the ConfigMap and the logs are read through pods/log.
    volumes = [Volume("workspace", str(workspace))] if on_pvc else []
    job_id = backend.submit(ps_spec(workspace, image="pytorch:local", volumes=volumes), WAITING)
    wait_for(backend, job_id, lambda s: all(r.phase is JobPhase.RUNNING for r in s.replicas), timeout=120)
    assert len(_objects(toy, job_id)) == 3 + 4
    if on_pvc:  # each pod samples its one process as its replica
        job_dir = JobStore(workspace / ".disttrain" / "jobs").job_dir(job_id)
        wait_for(backend, job_id, lambda s: sampled_replicas(job_dir) == sorted(REPLICAS), timeout=60)
    waiting = {(name, f"waiting as {name.split('-')[0]}") for name in REPLICAS}
    wait_for(backend, job_id, lambda s: {(ln.replica, ln.text) for ln in backend.logs(job_id)} >= waiting)
    status = backend.cancel(job_id)
    assert status.phase is JobPhase.CANCELLED
    assert {r.name: r.phase for r in status.replicas} == dict.fromkeys(REPLICAS, JobPhase.CANCELLED)
    wait_for(backend, job_id, lambda s: _objects(toy, job_id) == [], timeout=60)
    assert {(ln.replica, ln.text) for ln in backend.logs(job_id)} >= waiting  # kept past the pods
