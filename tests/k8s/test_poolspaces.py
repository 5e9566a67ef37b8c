"""The namespaces the Kubernetes pool listing asks (``poolspaces.py``): the default one first, then
each namespace the store's Kubernetes jobs ran in (a job of another backend or not launched yet
names none), a record read again only once it changed, and at most ``MAX_NAMESPACES``, the rest
named in a note."""

from __future__ import annotations

from pathlib import Path

from jupyter_disttrain.backends.kubernetes import poolspaces
from jupyter_disttrain.backends.kubernetes.poolspaces import JobNamespaces
from jupyter_disttrain.model.specs import JobSpec
from jupyter_disttrain.storage.store import JobRecord, JobStore


def add(store: JobStore, job_id: str, backend: str, namespace: str | None) -> JobRecord:
    state = {"namespace": namespace} if namespace else {}
    record = JobRecord(id=job_id, spec=JobSpec(backend=backend), backend_state=state)
    store.create(record, "print(1)\n")
    return record


def test_the_default_namespace_then_those_of_the_stores_kubernetes_jobs(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    store = JobStore(tmp_path / "jobs")
    add(store, "a-aaaaa", "kubernetes", "team-b")
    add(store, "b-bbbbb", "kubernetes", "team-a")
    add(store, "c-ccccc", "slurm", None)
    pending = add(store, "d-ddddd", "kubernetes", None)  # not launched yet
    spaces = JobNamespaces(store, "kubernetes")
    assert spaces.namespaces("team-a") == (["team-a", "team-b"], None)

    pending.backend_state["namespace"] = "team-c"  # launched meanwhile: its record rewritten
    store.write_record(pending)
    assert spaces.namespaces(None) == (["team-a", "team-b", "team-c"], None)

    monkeypatch.setattr(poolspaces, "MAX_NAMESPACES", 2)
    assert spaces.namespaces("default") == (
        ["default", "team-a"],
        "the pools of 2 more namespaces of your jobs are not listed",
    )
