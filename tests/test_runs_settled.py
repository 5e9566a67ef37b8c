"""The runs of a job that ended a while ago are read once: a listing of 1,000 runs then reads
only the running jobs' files. A job that ended only just now, or runs, is read on every listing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jupyter_disttrain.jobs.manager import JobManager
from jupyter_disttrain.model.specs import JobPhase, JobSpec, JobStatus, now_iso
from jupyter_disttrain.storage.store import JobRecord, JobStore
from jupyter_disttrain.tracking.sources import SETTLED_SECONDS


def _job(store: JobStore, phase: JobPhase, ended_ago: float | None) -> Path:
    spec = JobSpec(name="settled", nproc_per_node=1, accelerator="cpu")
    record = JobRecord(id=store.new_job_id(spec.name), spec=spec, request={"device": "cpu"})
    job_dir = store.create(record, "print('hello')\n")
    finish = now_iso(time.time() - ended_ago) if ended_ago is not None else None
    store.write_status(JobStatus(job_id=record.id, phase=phase, finish_time=finish))
    run = job_dir / "runs" / "lr"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"name": "lr", "hparams": {"lr": 0.1}, "status": "finished"}))
    (run / "metrics.jsonl").write_text('{"type":"train","name":"loss","value":0.5,"step":3,"time":1.0}\n')
    return run


@pytest.mark.parametrize(
    ("phase", "ended_ago", "kept"),
    [
        (JobPhase.SUCCEEDED, 3600.0, True),
        (JobPhase.FAILED, SETTLED_SECONDS + 5, True),
        (JobPhase.SUCCEEDED, 1.0, False),  # its ranks may still be writing their runs' ends
        (JobPhase.RUNNING, None, False),
    ],
)
def test_a_settled_jobs_runs_are_read_once(
    tmp_path: Path, phase: JobPhase, ended_ago: float | None, kept: bool
) -> None:
    store = JobStore(tmp_path / "jobs")
    run = _job(store, phase, ended_ago)
    manager = JobManager(store, "local")
    [first] = manager.list_runs()
    assert (first.hparams, first.metrics, first.step) == ({"lr": 0.1}, {"train/loss": 0.5}, 3)
    first.metrics["train/loss"] = 99.0  # a caller's change is its own
    (run / "run.json").write_text(json.dumps({"name": "lr", "hparams": {"lr": 0.2}, "status": "finished"}))
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"type":"train","name":"loss","value":0.25,"step":4,"time":2.0}\n')
    [again] = manager.list_runs()
    if kept:
        assert (again.hparams, again.metrics, again.step) == ({"lr": 0.1}, {"train/loss": 0.5}, 3)
    else:
        assert (again.hparams, again.metrics, again.step) == ({"lr": 0.2}, {"train/loss": 0.25}, 4)


def test_a_settled_job_written_again_is_read_again(tmp_path: Path) -> None:
    """A new end (a requeued job that ended again), a new run dir or an MLflow database written
    after the end: its runs are read afresh."""
    store = JobStore(tmp_path / "jobs")
    run = _job(store, JobPhase.FAILED, 3600.0)
    manager = JobManager(store, "local")
    [first] = manager.list_runs()
    (run / "run.json").write_text(json.dumps({"name": "lr", "hparams": {"lr": 0.2}, "status": "finished"}))
    ended = now_iso(time.time() - 600)
    store.write_status(JobStatus(job_id=first.job_id, phase=JobPhase.SUCCEEDED, finish_time=ended))
    [again] = manager.list_runs()
    assert again.hparams == {"lr": 0.2} and again.job_phase is JobPhase.SUCCEEDED

    (run.parent / "second").mkdir()
    (run.parent / "second" / "run.json").write_text(json.dumps({"name": "second", "hparams": {}}))
    assert [r.run for r in manager.list_runs()] == ["lr", "second"]
    (run.parents[1] / "mlflow.db").write_bytes(b"not a database yet")
    (run.parent / "second" / "run.json").write_text(json.dumps({"name": "second", "hparams": {"b": 2}}))
    assert [r.hparams for r in manager.list_runs()] == [{"lr": 0.2}, {"b": 2}]
