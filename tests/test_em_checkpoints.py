"""em's checkpoint API in real processes: ``run.checkpoint``, ``em.resume_from``,
``em.checkpoint_dir`` and ``em.on_preempt`` (a callback once on SIGTERM, then the stop as before)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.em_helpers import run_record

HERE = str(Path(__file__).resolve().parents[1])


def run_python(tmp_path: Path, source: str, **env: str) -> subprocess.CompletedProcess[str]:
    outside = ("RANK", "WORLD_SIZE")
    base = {k: v for k, v in os.environ.items() if not k.startswith("DISTTRAIN_") and k not in outside}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source)],
        cwd=tmp_path,
        env={**base, "PYTHONPATH": HERE, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def job_record(job_dir: Path) -> None:
    """A job dir with its job.json: a process whose job dir has none is taken for an orphan of a
    removed job, which the product stops (procs.orphans)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "job.json").write_text(json.dumps({"id": job_dir.name, "spec": {}}))


def test_checkpoint_lines_resume_from_and_the_checkpoint_dir_outside_and_inside_a_job(tmp_path: Path) -> None:
    source = """
    from pathlib import Path
    from jupyter_disttrain import em
    print(em.resume_from(), em.checkpoint_dir())
    run = em.create_run("r")
    run.checkpoint("ckpt/step-3.pt", step=3)
    run.checkpoint(Path("elsewhere"))
    try:
        run.checkpoint("x", step=1.5)
    except TypeError as exc:
        print(exc)
    """
    done = run_python(tmp_path, source)
    assert done.returncode == 0, done.stderr
    first, refused = done.stdout.splitlines()
    assert (
        first == f"None {tmp_path}/.disttrain/checkpoints" and (tmp_path / ".disttrain/checkpoints").is_dir()
    )
    assert refused == "step 1.5: an integer or None is needed"
    lines = (tmp_path / ".disttrain/runs/r/checkpoints.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    assert [(e["path"], e["step"]) for e in entries] == [
        (str(tmp_path / "ckpt/step-3.pt"), 3),
        (str(tmp_path / "elsewhere"), None),
    ]
    assert all(e["time"].endswith("Z") for e in entries)

    job = tmp_path / "job"
    job_record(job)
    done = run_python(
        tmp_path,
        source,
        DISTTRAIN_JOB_DIR=str(job),
        DISTTRAIN_JOB_ID="j1",
        DISTTRAIN_CHECKPOINT_DIR=str(job / "checkpoints"),
        DISTTRAIN_RESUME_FROM=str(tmp_path / "ckpt/step-3.pt"),
        RANK="1",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"{tmp_path}/ckpt/step-3.pt {job}/checkpoints"
    assert not (job / "runs/r/checkpoints.jsonl").exists()  # rank 1 does not record by default


def test_a_restarted_run_records_where_it_restarted_from_its_declared_checkpoint(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job_record(job)
    env = {"DISTTRAIN_JOB_DIR": str(job), "DISTTRAIN_JOB_ID": "j1"}
    first = """
    from jupyter_disttrain import em
    run = em.create_run("r")
    for step in range(6):
        run.log("train", {"loss": 1.0 / (step + 1)}, step=step)
        if step == 3:
            run.checkpoint("ckpt-3.pt", step=3)
    """
    assert run_python(tmp_path, first, **env).returncode == 0
    size = (job / "runs/r/metrics.jsonl").stat().st_size
    again = "from jupyter_disttrain import em\nem.create_run('r').log('train', {'loss': 0.2}, step=4)\n"
    done = run_python(tmp_path, again, DISTTRAIN_RESUME_FROM=str(tmp_path / "ckpt-3.pt"), **env)
    assert done.returncode == 0, done.stderr
    record = run_record(job / "runs/r")
    assert record["restarts"] == [{"offset": size, "step": 3}] and "resumed_from" not in record
    # A resume of another job's run (its job.json says so) is the run's resumed_from instead.
    new = tmp_path / "new"
    new.mkdir()
    resumed = {
        "job": "j1",
        "checkpoint": "c0",
        "step": 3,
        "kind": "torch",
        "path": "/x/c.pt",
        "job_dir": str(job),
    }
    (new / "job.json").write_text(json.dumps({"id": "j2", "spec": {"resumed_from": resumed}}))
    done = run_python(
        tmp_path, again, DISTTRAIN_JOB_DIR=str(new), DISTTRAIN_JOB_ID="j2", DISTTRAIN_RESUME_FROM="/x/c.pt"
    )
    assert done.returncode == 0, done.stderr
    assert run_record(new / "runs/r")["resumed_from"] == {"job": "j1", "run": "r", "step": 3}


PREEMPT = """
import os, signal, sys, time
from jupyter_disttrain import em
{before}
run = em.create_run("r")
def last_checkpoint():
    run.log("train", {{"loss": 0.5}}, step=7)
    run.checkpoint("last.pt", step=7)
    print("callback ran", flush=True)
em.on_preempt(last_checkpoint)
em.on_preempt(lambda: 1 / 0)  # a failing callback is reported; the stop goes on
os.kill(os.getpid(), signal.SIGTERM)
{after}
"""


def test_on_preempt_runs_once_then_the_process_stops_as_it_would_have(tmp_path: Path) -> None:
    done = run_python(tmp_path, PREEMPT.format(before="", after="time.sleep(30)"))
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert done.stdout.count("callback ran") == 1 and "ZeroDivisionError" in done.stderr
    record = run_record(tmp_path / ".disttrain/runs/r")
    assert (record["status"], record["final_metrics"]) == ("failed", {"train/loss": 0.5})
    assert '"step": 7' in (tmp_path / ".disttrain/runs/r/checkpoints.jsonl").read_text()

    # A handler that was there first (the user's, Lightning's) still gets the signal after it;
    # a second SIGTERM does not call the callback again.
    before = """
    def mine(signum, frame):
        print("user handler ran", flush=True)
    signal.signal(signal.SIGTERM, mine)
    """
    again = "os.kill(os.getpid(), signal.SIGTERM)"
    done = run_python(tmp_path, PREEMPT.format(before=textwrap.dedent(before), after=again))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("callback ran") == 1 and done.stdout.count("user handler ran") == 2
