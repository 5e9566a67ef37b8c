"""Helpers of the slurm group; its cluster is the session's ``slurm_cluster`` (tests/conftest.py)."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.model.specs import JobPhase, JobStatus
from jupyter_disttrain.storage.store import JobStore
from tests.test_kernel import job_root  # noqa: F401 (the kernels' job root, a fixture)

from .cluster import SlurmCluster


# -- helpers of the slurm group ------------------------------------------------------------------
def wait_for(ready: Callable[[], object], timeout: float, what: str) -> object:
    """``ready()``'s first true answer, polled; a failure naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (found := ready()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout:.0f} s")
        time.sleep(0.2)
    return found


def wait_log(job: api.Job, text: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not any(text in ln.text for ln in job.logs()):
        if time.monotonic() > deadline:
            status = job.status()
            pytest.fail(
                f"{text!r} not in the job's logs within {timeout:.0f} s ({status.phase}: {status.message})"
            )
        time.sleep(0.2)


def wait_phase(job: api.Job, phases: set[JobPhase], timeout: float = 120) -> JobStatus:
    found = wait_for(lambda: (s := job.status()).phase in phases and s, timeout, f"job {job.id} in {phases}")
    return found  # type: ignore[return-value]


def slurm_id(job: api.Job) -> str:
    return str(api.get_job(job.id, job.store).record.backend_state["slurm_job_id"])


def slurm_state(cluster: SlurmCluster, slurm_job: str) -> str:
    return cluster.run(
        "squeue", "--noheader", "--states=all", f"--jobs={slurm_job}", "-O", "State", check=False
    ).stdout.strip()


@pytest.fixture
def store(tmp_path: Path, slurm_cluster: SlurmCluster) -> JobStore:
    """A job root of the test's own, on the 'shared filesystem' (this machine's) the nodes see."""
    return JobStore(tmp_path / "jobs")


def submit(store: JobStore, script: str, **words: object) -> api.Job:
    return api.submit(textwrap.dedent(script), store=store, backend="slurm", **words)  # type: ignore[arg-type]
