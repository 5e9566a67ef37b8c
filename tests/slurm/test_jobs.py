"""Real jobs on the test cluster through the Python API: how each way a job can end reads.

Slurm checks time limits every 30 s and has a one-minute minimum, so the time-limit job starts
with the module (``timed_out``, asked for by the first test) and is checked later; the test that
restarts slurmctld comes after it (a warning signal due while the controller is down is lost). A Slurm stop
signals every process of the job at once, ``srun`` included, which then kills its step with
SIGKILL: what a rank must have written before (an ``em`` point) is made durable first.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.backends.slurm.script import START
from jupyter_disttrain.jobs.manager import manager_for
from jupyter_disttrain.model.errors import BackendError, InvalidSpecError
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage import procs
from jupyter_disttrain.storage.store import JobStore

from .cluster import SlurmCluster
from .conftest import slurm_id, slurm_state, submit, wait_for, wait_log, wait_phase

pytestmark = pytest.mark.slurm

TICKS = """
import sys, time
for i in range({n}):
    print("tick", i, flush=True)
    time.sleep({pause})
"""
ON_DT2 = {"sbatch_options": ["--nodelist=dt2"]}  # the tests that take a whole node take this one


CHECKPOINTS = """
import signal, sys, time
def stop(num, frame):
    print("checkpoint saved", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
for i in range(600):
    print("tick", i, flush=True)
    time.sleep(0.5)
"""


@pytest.fixture(scope="module")
def timed_out(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[api.Job, api.Job]]:
    """Two jobs on dt1: one runs into its one-minute limit, the other asks Slurm for a warning
    60 s before its two-minute limit (``--signal=B:TERM@60``: to the batch script, the launcher)
    and checkpoints on the SIGTERM its launcher then passes on through Slurm. The warning falls
    due a minute after the start, time for the rank to set its handler (due at 10 s, a rank on a
    loaded machine had not yet set it)."""
    store = JobStore(tmp_path_factory.mktemp("timeout") / "jobs")
    options = {"time": "1", "sbatch_options": ["--nodelist=dt1"]}
    job = submit(store, TICKS.format(n=600, pause=0.5), gpus=1, name="limit", options=options)
    warned = {"time": "2", "sbatch_options": ["--nodelist=dt1", "--signal=B:TERM@60"]}
    graceful = submit(store, CHECKPOINTS, gpus=1, name="warned", options=warned)
    yield job, graceful
    for one in (job, graceful):
        api.get_job(one.id, store).cancel()


def test_cancel_stops_every_process_after_the_grace_signal(
    store: JobStore,
    slurm_cluster: SlurmCluster,
    timed_out: tuple[api.Job, api.Job],  # their clocks start now
) -> None:
    script = """
    import signal, sys, time
    def stop(num, frame):
        print("got SIGTERM", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    print("ready", flush=True)
    while True:
        time.sleep(0.1)
    """
    job = submit(store, script, gpus=2, name="cancel", options=ON_DT2)
    wait_log(job, "ready")
    wait_for(lambda: sum("ready" in ln.text for ln in job.logs()) == 2, 60, "both ranks ready")
    (started,) = [e.message for e in job.status().events if e.reason == "Started"]
    assert f"({START} (a batch job" in started, started  # the launcher's start: cold, as the request says
    stacks = manager_for(store).stack(job.id, "rank-1")  # on node dt2, read through srun --overlap
    assert "time.sleep" in stacks.text or "<module>" in stacks.text, stacks
    status = job.cancel()
    assert (status.phase, status.reason, status.message) == (
        JobPhase.CANCELLED,
        "Cancelled",
        "cancelled by the user",
    )
    # The grace signal reached every rank. Slurm signals the whole step, torchrun's agent
    # included, and the agent passes SIGTERM on as it stops: a rank still exiting can get it twice.
    assert {ln.rank for ln in job.logs() if "got SIGTERM" in ln.text} == {0, 1}
    wait_for(lambda: not procs.job_processes(job.id), 30, "no process of the job left")
    wait_for(
        lambda: slurm_state(slurm_cluster, slurm_id(job)) in ("CANCELLED", "COMPLETED"), 30, "Slurm ended it"
    )


def test_scancel_from_a_terminal_is_not_a_cancel_by_the_user(
    store: JobStore, slurm_cluster: SlurmCluster
) -> None:
    job = submit(store, TICKS.format(n=600, pause=0.2), gpus=1, name="scancel")
    wait_log(job, "tick 1")
    slurm_cluster.run("scancel", slurm_id(job))
    status = wait_phase(job, {JobPhase.CANCELLED, JobPhase.FAILED})
    assert (status.phase, status.reason) == (JobPhase.CANCELLED, "CANCELLED")
    assert f"Slurm job {slurm_id(job)} was cancelled outside jupyter_disttrain" in (status.message or "")
    assert any(e.reason == "SlurmStopping" for e in status.events)
    listed = cli("--root", str(store.root), "list")  # a terminal's view of it
    assert any(line.split()[:3] == [job.id, "slurm", "Cancelled"] for line in listed.splitlines()), listed


def test_a_job_pending_on_resources_says_why_then_runs(store: JobStore, slurm_cluster: SlurmCluster) -> None:
    blocker = slurm_cluster.run(
        "sbatch", "--parsable", "--nodelist=dt2", "--exclusive", "--output=/dev/null", "--wrap", "sleep 300"
    ).stdout.strip()
    wait_for(lambda: slurm_state(slurm_cluster, blocker) == "RUNNING", 30, "the blocker runs")
    job = submit(store, TICKS.format(n=2, pause=0), gpus=2, name="waits", options=ON_DT2)
    status = wait_for(
        lambda: (s := job.status()).reason == "Resources" and s, 30, "the job pends on Resources"
    )
    assert status.phase is JobPhase.PENDING  # type: ignore[union-attr]
    assert f"Slurm job {slurm_id(job)} is pending, partition debug: waiting for nodes" in status.message  # type: ignore[union-attr]
    slurm_cluster.run("scancel", blocker)
    assert wait_phase(job, {JobPhase.SUCCEEDED, JobPhase.FAILED}).phase is JobPhase.SUCCEEDED


def test_a_node_set_down_fails_the_job_naming_it(store: JobStore, slurm_cluster: SlurmCluster) -> None:
    job = submit(store, TICKS.format(n=600, pause=0.2), gpus=1, name="down", options=ON_DT2)
    wait_log(job, "tick 1")
    slurm_cluster.set_node_down("dt2", "test")
    try:
        status = wait_phase(job, {JobPhase.FAILED, JobPhase.CANCELLED, JobPhase.SUCCEEDED})
    finally:
        slurm_cluster.resume_node("dt2")
    assert (status.phase, status.reason) == (JobPhase.FAILED, "NODE_FAIL")
    assert "lost its node (dt2)" in (status.message or "")
    wait_for(lambda: not procs.job_processes(job.id), 30, "no process of the job left")


def test_bad_input_is_one_line_and_submits_nothing(
    store: JobStore, slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = set(slurm_cluster.run("squeue", "--noheader", "--states=all", "-O", "JobID").stdout.split())
    cases = [
        (
            {"options": {"partition": "nope"}},
            "--partition nope: no such partition; this cluster has debug, urgent",
        ),
        ({"options": {"time": "1:2:3:4"}}, "--time '1:2:3:4' is not a Slurm time limit"),
        ({"accelerator": "gpu"}, "partition debug has no GPUs: leave out --accelerator gpu"),
        ({"nodes": 3}, "--nodes 3: partition debug has 2 node(s)"),
        ({"memory": "4Gi"}, "--memory is a Kubernetes flag; use --mem (e.g. 64G)"),
        ({"options": {"keep_warm": "soon"}}, "--keep-warm 'soon' is not a duration; write e.g. '15m'"),
        (
            {"launcher": "mxnet", "launcher_options": {"workers": 2}},
            "--launcher mxnet runs on the local and kub",
        ),
    ]
    for words, message in cases:
        with pytest.raises(InvalidSpecError) as info:
            submit(store, "print(1)\n", **words)
        assert message in str(info.value) and "\n" not in str(info.value)
    script = store.root.parent / "train.py"
    script.write_text("print(1)\n")
    shown = cli("run", str(script), "--backend", "slurm", "--time", "10", "--dry-run")
    assert "sbatch --parsable --job-name=train-" in shown and " --time=10 " in shown, shown
    monkeypatch.delenv("SLURM_CONF")
    with pytest.raises(BackendError, match=r"Slurm's commands find no cluster here .*: set SLURM_CONF$"):
        submit(store, "print(1)\n")
    monkeypatch.undo()
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(
        InvalidSpecError, match="not on PATH: the slurm backend needs Slurm's client commands"
    ):
        submit(store, "print(1)\n")
    monkeypatch.undo()
    assert store.records() == []
    assert (
        set(slurm_cluster.run("squeue", "--noheader", "--states=all", "-O", "JobID").stdout.split()) == before
    )


def cli(*words: str) -> str:
    """What ``jupyter disttrain WORDS`` prints (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_disttrain.cli", *words], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_sbatch_refusing_the_job_fails_it_in_one_line(store: JobStore) -> None:
    with pytest.raises(BackendError) as info:
        submit(store, "print(1)\n", options={"constraint": "nope"})
    assert (
        str(info.value)
        == "sbatch refused the job: sbatch: error: Batch job submission failed: Invalid feature specification"
    )
    (record,) = store.records()  # nothing was launched, and nothing the user submitted is lost
    assert store.read_status(record.id).phase is JobPhase.FAILED  # type: ignore[union-attr]


def test_a_time_limit_hit_is_named_and_a_warning_signal_stops_it_gracefully(
    timed_out: tuple[api.Job, api.Job],
) -> None:
    limited, warned = timed_out
    status = wait_phase(warned, {JobPhase.FAILED, JobPhase.CANCELLED, JobPhase.SUCCEEDED}, timeout=150)
    assert (status.phase, status.reason) == (JobPhase.FAILED, "SlurmStopped"), status.message
    assert any(ln.text == "checkpoint saved" for ln in warned.logs())  # the rank's own handler ran
    status = wait_phase(limited, {JobPhase.FAILED, JobPhase.CANCELLED, JobPhase.SUCCEEDED}, timeout=150)
    assert (status.phase, status.reason) == (JobPhase.FAILED, "TIMEOUT"), status.message
    assert "reached its time limit (0:01:00): Slurm stopped it" in (status.message or "")
    assert any(e.reason == "SlurmStopping" and "TimeLimit" in e.message for e in status.events)


def test_a_preempted_job_with_requeue_runs_again_appending_to_its_logs(
    store: JobStore, slurm_cluster: SlurmCluster
) -> None:
    script = """
    import os, time
    from jupyter_disttrain import em
    restart = os.environ.get("SLURM_RESTART_COUNT", "0")
    print("run", restart, os.environ.get("DISTTRAIN_RESUME_FROM"), flush=True)
    if restart == "0":  # the requeued rank starts from it with no code of its own (README "Checkpoints")
        import torch
        torch.save({"step": 0}, os.path.join(os.environ["DISTTRAIN_CHECKPOINT_DIR"], "step_0.pt"))
    run = em.create_run("fit")  # the same name again: the requeued run continues it
    run.log("train", {"restart": float(restart)}, step=int(restart))
    points = os.path.join(os.environ["DISTTRAIN_JOB_DIR"], "runs", "fit", "metrics.jsonl")
    while not os.path.exists(points) or f'"step":{restart}' not in open(points).read():
        time.sleep(0.05)  # on disk before the preemption
    for i in range(600 if restart == "0" else 2):
        print("tick", i, flush=True)
        time.sleep(0.2)
    run.finish()
    """
    options = {"requeue": True, **ON_DT2}
    job = submit(store, script, gpus=1, name="requeue", options=options)
    wait_log(job, "tick 1")
    slurm_cluster.run(
        "sbatch", "-p", "urgent", "--nodelist=dt2", "--exclusive", "--output=/dev/null", "--wrap", "sleep 2"
    )
    status = wait_for(lambda: (s := job.status()).reason == "Requeued" and s, 60, "the job requeued")
    assert status.phase is JobPhase.PENDING  # type: ignore[union-attr]
    assert f"Slurm job {slurm_id(job)} was requeued (restart 1)" in status.message  # type: ignore[union-attr]
    # Slurm holds a requeued job two minutes before it may start again: not the test's to wait.
    slurm_cluster.run("scontrol", "update", f"jobid={slurm_id(job)}", "StartTime=now")
    status = wait_phase(job, {JobPhase.SUCCEEDED, JobPhase.FAILED})
    assert status.phase is JobPhase.SUCCEEDED, status.message
    assert [r.restarts for r in status.replicas] == [1]
    assert any(e.reason == "Requeued" for e in status.events)
    texts = [ln.text for ln in job.logs(replica="rank-0")]
    resumed = f"run 1 {job.dir / 'checkpoints' / 'step_0.pt'}"
    assert texts[0] == "run 0 None" and texts[-3:] == [resumed, "tick 0", "tick 1"]  # the same log, appended
    (fit,) = manager_for(store).list_runs(job.id)  # one run, continued
    assert (fit.run, fit.status, fit.step, fit.metrics) == ("fit", "finished", 1, {"train/restart": 1.0})
    points = manager_for(store).run_detail(job.id, "fit").points
    assert [(p.step, p.value) for p in points] == [(0, 0.0), (1, 1.0)]  # both runs' points


def test_slurmctld_restarted_mid_job_loses_no_process_and_no_line(
    store: JobStore, slurm_cluster: SlurmCluster
) -> None:
    job = submit(store, TICKS.format(n=40, pause=0.25), gpus=1, name="ctld")
    wait_log(job, "tick 2")
    slurm_cluster.stop_controller()
    try:
        status = job.status()
        assert (status.phase, status.reason) == (JobPhase.RUNNING, "SlurmUnreachable")
        assert "Slurm's controller does not answer" in (status.message or "")
    finally:
        slurm_cluster.start_controller()
    status = wait_phase(job, {JobPhase.SUCCEEDED, JobPhase.FAILED})
    assert status.phase is JobPhase.SUCCEEDED, status.message
    assert [ln.text for ln in job.logs() if ln.rank == 0] == [f"tick {i}" for i in range(40)]
    slurm_cluster.wait_responding()  # the next test's jobs need the nodes back in service
