"""Pods that cannot start say why, and do not wait forever: single-node claims refused up front
(or colocated), the cluster's warnings as the job's reason, and the pending timeout."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import JobPhase, JobSpec
from jupyter_disttrain.storage.store import JobStore

from .conftest import DDP_SCRIPT, ddp_spec, start_toy, wait_for
from .fakeapi import BATCH_JOBS, ApiStatus
from .schema_check import schema_errors, semantic_errors
from .test_zero_config import notebook_pod
from .toycluster import PODS, PVCS, SERVICES, ToyCluster

NOTEBOOK_NODE = "fake-node-2"


@pytest.fixture
def two_nodes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ToyCluster]:
    yield from start_toy(monkeypatch, tmp_path, nodes=2)


def _pvc(name: str, *modes: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"accessModes": list(modes)}}


@pytest.fixture
def in_notebook(
    two_nodes: ToyCluster, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> KubernetesBackend:
    """A running notebook pod on fake-node-2 whose home is a ReadWriteOnce claim."""
    data = tmp_path / "data"
    data.mkdir()
    pod = notebook_pod(workspace, data)
    pod["spec"]["nodeName"], pod["status"] = NOTEBOOK_NODE, {"phase": "Running"}
    c = two_nodes.cluster
    c.create(PODS, "team-a", pod)
    c.create(PVCS, "team-a", _pvc("workspace-alice", "ReadWriteOnce"))
    c.create(PVCS, "team-a", _pvc("imagenet", "ReadOnlyMany"))  # mounted read-only: fine
    monkeypatch.setenv("POD_NAME", "nb-alice-0")
    monkeypatch.setenv("POD_NAMESPACE", "team-a")
    return KubernetesBackend(JobStore(workspace / ".disttrain" / "jobs"))


def _zero_config(
    workspace: Path,
    nodes: int = 2,
    launcher: str = "torchrun",
    launcher_options: dict[str, Any] | None = None,
    **options: Any,
) -> JobSpec:
    return JobSpec(
        name="zero",
        backend="kubernetes",
        nodes=nodes,
        nproc_per_node=1,
        working_dir=str(workspace),
        accelerator="cpu",
        launcher=launcher,
        launcher_options=launcher_options or {},
        options={"flavor": "job", **options},
    )


def test_a_read_write_once_claim_is_refused_for_several_nodes_unless_colocated(
    in_notebook: KubernetesBackend, two_nodes: ToyCluster, workspace: Path
) -> None:
    backend, c = in_notebook, two_nodes.cluster
    with pytest.raises(InvalidSpecError) as err:
        backend.submit(_zero_config(workspace), DDP_SCRIPT)
    message = str(err.value)
    assert "'workspace-alice'" in message and "ReadWriteOnce" in message and "\n" not in message
    for way_out in ("--nodes 1", "--colocate", "ReadWriteMany", f"--pvc CLAIM:{workspace}"):
        assert way_out in message
    assert not c.items(BATCH_JOBS.key) and not c.items(SERVICES)  # nothing was created
    backend.dryrun(_zero_config(workspace, nodes=1))

    job_id = backend.submit(_zero_config(workspace, colocate=True), DDP_SCRIPT)
    job = backend.store.read_record(job_id).request["manifests"][-1]
    assert schema_errors(job, "1.33") == [] and semantic_errors(job) == []
    status = wait_for(backend, job_id, lambda s: s.is_terminal)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    assert {r.node for r in status.replicas if r.phase is JobPhase.SUCCEEDED} == {NOTEBOOK_NODE}


def test_an_mxnet_jobs_pods_count_though_it_has_one_node(
    in_notebook: KubernetesBackend, two_nodes: ToyCluster, workspace: Path
) -> None:
    """A parameter-server job keeps --nodes at 1 but runs a pod per replica, each mounting the
    notebook's claims: a ReadWriteOnce one is refused as for several nodes."""
    ps = {"launcher": "mxnet", "launcher_options": {"servers": 1, "workers": 2}}
    with pytest.raises(InvalidSpecError) as err:
        in_notebook.submit(_zero_config(workspace, nodes=1, **ps), DDP_SCRIPT)
    message = str(err.value)
    assert message.startswith("--launcher mxnet runs 4 pods (1 scheduler, 1 server, 2 worker): ")
    assert "'workspace-alice'" in message and "ReadWriteOnce" in message and "\n" not in message
    assert "--colocate" in message and "--nodes 1" not in message  # one node is what it has
    assert not two_nodes.cluster.items(BATCH_JOBS.key)
    info = in_notebook.dryrun(_zero_config(workspace, nodes=1, colocate=True, **ps))
    affinities = [str(o["spec"]["template"]["spec"]["affinity"]) for o in info.request.manifests[1:]]
    assert len(affinities) == 3 and all(NOTEBOOK_NODE in a for a in affinities)  # every role's Job


def test_the_magic_takes_colocate_and_pending_timeout(
    in_notebook: KubernetesBackend, workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setenv("DISTTRAIN_JOB_ROOT", str(workspace / ".disttrain" / "jobs"))
    monkeypatch.chdir(workspace)
    ip = InteractiveShell.instance()
    try:
        ip.run_cell("%load_ext jupyter_disttrain")
        line = "--backend kubernetes --flavor job --nodes 2 --colocate --pending-timeout 90s --dry-run"
        ip.run_cell_magic("distrun", line, "print(1)")
    finally:
        InteractiveShell.clear_instance()
    out = capsys.readouterr().out
    assert "requiredDuringSchedulingIgnoredDuringExecution" in out and NOTEBOOK_NODE in out


def test_multi_attach_is_the_reason_and_the_pending_timeout_ends_the_job(
    in_notebook: KubernetesBackend, two_nodes: ToyCluster, workspace: Path
) -> None:
    """Where the claim's access modes cannot be read (an older Role), the cluster says it."""
    c = two_nodes.cluster
    c.denied.add(("get", "persistentvolumeclaims"))
    job_id = in_notebook.submit(_zero_config(workspace, pending_timeout="6s"), DDP_SCRIPT)
    status = wait_for(in_notebook, job_id, lambda s: s.reason == "FailedAttachVolume", timeout=60)
    stuck = next(r for r in status.replicas if r.reason == "FailedAttachVolume")
    assert "Multi-Attach error" in (stuck.message or "") and stuck.phase is JobPhase.PENDING
    assert f"{stuck.name}: Multi-Attach error" in (status.message or "")
    status = wait_for(in_notebook, job_id, lambda s: s.is_terminal, timeout=60)
    assert (status.phase, status.reason) == (JobPhase.FAILED, "FailedAttachVolume")
    assert "within 6s (--pending-timeout)" in (status.message or "")
    assert c.get(BATCH_JOBS.key, "team-a", job_id) is None  # its pods no longer hold the claim


def test_an_admission_refusal_is_the_job_reason_until_the_pending_timeout(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    """A quota used up now may have room later: the job waits, saying why (a refusal no wait
    can fix fails at once: test_pending_judgement.py)."""
    refusal = "exceeded quota: compute, requested: cpu=4, used: cpu=8, limited: cpu=8"

    def admit(kind: str, obj: dict[str, Any]) -> None:
        if kind == "Pod":
            raise ApiStatus(403, "Forbidden", f'pods "{obj["metadata"]["name"]}" is forbidden: {refusal}')

    toy.cluster.admission.append(admit)
    spec = ddp_spec(workspace, nodes=1, options={"flavor": "job", "pending_timeout": "4"})
    job_id = backend.submit(spec, DDP_SCRIPT)
    status = wait_for(backend, job_id, lambda s: s.reason == "FailedCreate", timeout=60)
    assert status.phase is JobPhase.PENDING and refusal in (status.message or "")
    status = wait_for(backend, job_id, lambda s: s.is_terminal, timeout=60)
    assert (status.phase, status.reason) == (JobPhase.FAILED, "FailedCreate")
    assert refusal in (status.message or "") and "--pending-timeout" in (status.message or "")
