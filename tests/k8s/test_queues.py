"""Jobs that wait in a queue: Kueue holds a workload suspended (a Job's ``spec.suspend``, a
PyTorchJob's ``spec.runPolicy.suspend``), a gang scheduler leaves its pods unbound (a
PyTorchJob's ``schedulingPolicy.queue``, T9k's ``t9kScheduler.queue``). Waiting for the queue is
never "pending too long": ``--pending-timeout`` counts from when the queue lets the job go, also
when the process that saw it queued is another one (the Jupyter server restarted)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.model.specs import JobPhase, JobStatus

from .conftest import DDP_SCRIPT, ddp_spec, start_toy, wait_for
from .fakeapi import BATCH_JOBS, PYTORCHJOBS
from .toycluster import PODS, T9K_SCHEDULER, ToyCluster, kueue_admit


def held_for(backend: KubernetesBackend, job_id: str, seconds: float) -> JobStatus:
    """The status after ``seconds`` of polling, during which the job never ended."""
    deadline = time.monotonic() + seconds
    while True:
        status = backend.describe(job_id)
        assert not status.is_terminal, status.to_dict()
        if time.monotonic() > deadline:
            return status
        time.sleep(0.1)


def _reasons(status: JobStatus) -> list[str]:
    """Our own events' reasons (the cluster's name an object)."""
    return [e.reason for e in status.events if e.object is None]


def _pods(toy: ToyCluster, job_id: str) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in toy.cluster.items(PODS)
        if p["metadata"].get("labels", {}).get("disttrain.io/job-id") == job_id
    ]


def test_a_pytorchjob_that_kueue_holds_is_not_pending_too_long(
    kueue_kubeflow: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    options = {"flavor": "pytorchjob", "queue": "research", "pending_timeout": "2s"}
    job_id = backend.submit(ddp_spec(workspace, options=options), DDP_SCRIPT)
    pj = kueue_kubeflow.cluster.get(PYTORCHJOBS.key, "team-a", job_id)
    assert pj is not None and pj["spec"]["runPolicy"]["suspend"] is True  # Kueue's webhook
    status = held_for(backend, job_id, 4)  # twice the timeout, in the queue
    assert status.phase is JobPhase.PENDING and "Queued" in _reasons(status)
    assert _pods(kueue_kubeflow, job_id) == []  # the operator makes none while suspended
    kueue_admit(kueue_kubeflow.cluster, "PyTorchJob", "team-a", job_id)
    status = wait_for(backend, job_id, lambda s: s.is_terminal)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    assert _reasons(status)[-2:] == ["Queued", "Admitted"]


@pytest.fixture
def t9k_gang(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ToyCluster]:
    yield from start_toy(monkeypatch, tmp_path, install=("t9k",), gang_schedulers=(T9K_SCHEDULER,))


def test_a_job_in_a_gang_schedulers_queue_is_not_pending_too_long(
    t9k_gang: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    """T9k's scheduler holds the pods, unbound, while the job waits in its queue: no suspend field."""
    options = {"flavor": "t9k", "queue": "research", "pending_timeout": "2s"}
    job_id = backend.submit(ddp_spec(workspace, options=options), DDP_SCRIPT)
    status = held_for(backend, job_id, 4)
    assert len(_pods(t9k_gang, job_id)) == 2 and not any(r.node for r in status.replicas)
    assert status.phase is JobPhase.PENDING and "Queued" in _reasons(status)
    t9k_gang.kubelet.release(T9K_SCHEDULER)
    status = wait_for(backend, job_id, lambda s: s.is_terminal)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    assert _reasons(status)[-2:] == ["Queued", "Admitted"]


@pytest.fixture
def slow_resume(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ToyCluster]:
    yield from start_toy(monkeypatch, tmp_path, kueue=True, resume_delay=1.0)


def test_the_clock_starts_when_the_queue_admits_the_job_not_at_submission(
    slow_resume: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    """Between Kueue's un-suspend and the Job controller's startTime write (a second here) the
    job has never run; it queued longer than the timeout, yet the clock starts at admission. The
    process that sees the admission is not the one that saw the queue: only status.json tells."""
    options = {"flavor": "job", "queue": "research", "pending_timeout": "3s"}
    job_id = backend.submit(ddp_spec(workspace, options=options), DDP_SCRIPT)
    job = slow_resume.cluster.get(BATCH_JOBS.key, "team-a", job_id)
    assert job is not None and job["spec"]["suspend"] is True
    submitted = backend.store.read_status(job_id)  # queued from the start, before anyone looks
    assert submitted is not None and _reasons(submitted)[-1] == "Queued"
    held_for(backend, job_id, 4)
    restarted = KubernetesBackend(backend.store)  # the Jupyter server, started again
    kueue_admit(slow_resume.cluster, "Job", "team-a", job_id)
    status = wait_for(restarted, job_id, lambda s: s.is_terminal)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    assert _reasons(status)[-2:] == ["Queued", "Admitted"]
