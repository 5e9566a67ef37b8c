"""deploy/rbac.yaml is valid and is all the backend needs: a full job lifecycle under that Role."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.errors import BackendError
from jupyter_disttrain.specs import JobPhase
from jupyter_disttrain.store import JobStore

from .conftest import ddp_spec, wait_for
from .schema_check import schema_errors
from .test_zero_config import notebook_pod
from .toycluster import PODS, ToyCluster

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"


def test_rbac_yaml_validates() -> None:
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    assert [d["kind"] for d in docs] == ["Role", "RoleBinding"]
    for version in ("1.27", "1.33"):
        for doc in docs:
            assert schema_errors(doc, version) == []


def test_a_job_lifecycle_needs_nothing_more(
    toy: ToyCluster, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    role = next(yaml.safe_load_all(RBAC.read_text()))
    toy.cluster.create(PODS, "team-a", notebook_pod(workspace, tmp_path))
    toy.cluster.grant_role(role)
    monkeypatch.setenv("POD_NAME", "nb-alice-0")
    monkeypatch.setenv("POD_NAMESPACE", "team-a")
    backend = KubernetesBackend(JobStore(workspace / ".disttrain" / "jobs"))
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
