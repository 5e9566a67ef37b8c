"""Stopping a Slurm job: the grace period's SIGTERM to its launcher first, then Slurm's own end.

A batch job's launcher is the batch script, reached with ``scancel --batch --signal=TERM`` (no
rank sees that signal); a launcher beside the kernel (job steps) is a local process, signalled
as a local job's. Either records the end; then ``scancel`` ends whatever of the job is left.
"""

from __future__ import annotations

import os
import signal
import time

from ...storage import procs
from ...storage.store import JobRecord, JobStore
from ..agents.supervisor import LAUNCHER_FILE
from .client import SlurmClient
from .request import BATCH
from .status import read_dict


def cancel_batch(
    client: SlurmClient, store: JobStore, record: JobRecord, slurm_job: str, grace: float
) -> None:
    """The grace period's SIGTERM to the launcher alone (the batch script), which stops the
    steps and records the end; then ``scancel`` for whatever is left."""
    launched = (store.job_dir(record.id) / LAUNCHER_FILE).exists()
    if launched:
        client.cancel(slurm_job, signal="TERM", batch=True)
        wait_ended(store, record.id, grace + 15)
    client.cancel(slurm_job)


def cancel_steps(client: SlurmClient, store: JobStore, record: JobRecord, grace: float) -> None:
    """The launcher beside the kernel gets SIGTERM as a local job's does; any step of the job
    it left is cancelled."""
    launcher = read_dict(store.job_dir(record.id) / LAUNCHER_FILE)
    if launcher and procs.is_alive(launcher):
        os.kill(int(launcher["pid"]), signal.SIGTERM)
        wait_ended(store, record.id, grace + 15)
    stop_leftovers(client, record)


def cancel_kept(
    client: SlurmClient, store: JobStore, record: JobRecord, slurm_job: str, grace: float
) -> None:
    """A job in a kept batch job: the grace period's SIGTERM to its launcher's step alone (the
    kept job stays for the next re-run); then any step of the job left."""
    for step, name in client.steps(slurm_job).items():
        if name == record.id:
            client.cancel(step, signal="TERM")
    wait_ended(store, record.id, grace + 15)
    stop_leftovers(client, record)


def wait_ended(store: JobStore, job_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = store.read_status(job_id)
        if status is not None and status.is_terminal:
            return
        time.sleep(0.1)


def stop_leftovers(client: SlurmClient, record: JobRecord) -> None:
    slurm_job = record.backend_state.get("slurm_job_id")
    if not slurm_job:
        return
    if record.backend_state.get("mode") == BATCH:
        client.cancel(slurm_job)
        return
    for step, name in client.steps(slurm_job).items():
        if name == record.id:
            client.cancel(step)
