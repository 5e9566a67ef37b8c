"""The local backend with real torchrun processes (CPU, gloo)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from jupyter_disttrain import api, procs
from jupyter_disttrain.backends.local import LocalBackend
from jupyter_disttrain.backends.torchrun import agent_commands
from jupyter_disttrain.errors import InvalidSpecError, UnknownBackendError
from jupyter_disttrain.specs import JobPhase, JobSpec
from jupyter_disttrain.store import JobStore

ALL_REDUCE = """
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"rank={dist.get_rank()} world={dist.get_world_size()} sum={t.item():.0f} "
      f"job={os.environ['DISTTRAIN_JOB_ID']} tb={os.environ['DISTTRAIN_TENSORBOARD_DIR']}")
dist.destroy_process_group()
"""

SLEEPS = """
import time
print("started", flush=True)
time.sleep(600)
"""

IGNORES_TERM = """
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("started", os.environ["RANK"], flush=True)
while True:
    time.sleep(0.2)
"""


def _wait_running(job: api.Job, ranks: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while job.status().replicas_ready < ranks:
        assert time.monotonic() < deadline, job.status()
        time.sleep(0.05)


def test_two_rank_gloo_job_all_reduces_and_keeps_per_rank_logs(store: JobStore) -> None:
    job = api.submit(ALL_REDUCE, store=store, gpus=2, name="allreduce")
    status = job.wait(timeout=120)
    assert status.phase is JobPhase.SUCCEEDED, status
    assert [(r.name, r.phase, r.exit_code) for r in status.replicas] == [
        ("rank-0", JobPhase.SUCCEEDED, 0),
        ("rank-1", JobPhase.SUCCEEDED, 0),
    ]
    by_rank = {ln.rank: ln.text for ln in job.logs() if ln.rank is not None}
    tb = str(job.dir / "tensorboard")
    assert by_rank == {r: f"rank={r} world=2 sum=3 job={job.id} tb={tb}" for r in (0, 1)}
    assert (job.dir / "train.py").read_text() == ALL_REDUCE
    # A fresh process (another store object) reads the same final state.
    again = api.get_job(job.id, JobStore(store.root))
    assert again.status().phase is JobPhase.SUCCEEDED


def test_two_nodes_on_one_machine_run_through_two_agents(store: JobStore) -> None:
    job = api.submit(ALL_REDUCE, store=store, gpus=1, nodes=2)
    status = job.wait(timeout=120)
    assert status.phase is JobPhase.SUCCEEDED, status
    assert sorted(r.node or "" for r in status.replicas) == ["node-0", "node-1"]
    texts = sorted(ln.text for ln in job.logs() if ln.rank is not None)
    assert texts[0].startswith("rank=0 world=2 sum=3") and texts[1].startswith("rank=1 world=2 sum=3")
    agents = job.record.request["agents"]
    assert len(agents) == 2 and all("--rdzv-backend=c10d" in a["argv"] for a in agents)


def test_cancel_kills_the_whole_tree_even_when_ranks_ignore_sigterm(store: JobStore) -> None:
    job = api.submit(IGNORES_TERM, store=store, gpus=2, options={"grace_period": 1.0})
    _wait_running(job, 2)
    assert len(procs.job_processes(job.id)) >= 3  # agent + 2 workers
    status = job.cancel()
    assert status.phase is JobPhase.CANCELLED
    assert {r.phase for r in status.replicas} == {JobPhase.CANCELLED}
    assert procs.job_processes(job.id) == []
    assert job.cancel().phase is JobPhase.CANCELLED  # idempotent


def test_a_failing_rank_fails_the_job_and_names_the_cause(store: JobStore) -> None:
    script = """
import torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise ZeroDivisionError("boom on rank 1")
dist.barrier()
"""
    job = api.submit(script, store=store, gpus=2)
    status = job.wait(timeout=120)
    assert status.phase is JobPhase.FAILED
    assert "rank-1 exited with code 1" in (status.message or "")
    # The headline names the root cause; the message then carries that rank's traceback.
    headline, _, traceback = (status.message or "").partition("\n")
    assert headline.startswith("rank-1 exited with code 1: ")  # torch may prefix "[rank1]: "
    assert headline.endswith("ZeroDivisionError: boom on rank 1")
    assert "Traceback (most recent call last):" in traceback
    assert 'raise ZeroDivisionError("boom on rank 1")' in traceback
    assert len(traceback.splitlines()) <= 20
    assert procs.job_processes(job.id) == []


def test_a_lost_launcher_is_reported_and_cancel_still_cleans_up(store: JobStore) -> None:
    job = api.submit(IGNORES_TERM, store=store, gpus=1, options={"grace_period": 0.5})
    _wait_running(job, 1)
    launcher = (job.dir / "launcher.json").read_text()
    pid = int(__import__("json").loads(launcher)["pid"])
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while job.status().phase is not JobPhase.FAILED:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert job.status().reason == "LauncherLost"
    # Its rank ignores the SIGTERM its agent passed on when the launcher died: a cancel of the
    # ended job still finds and stops it.
    assert procs.job_processes(job.id)
    assert job.cancel().reason == "LauncherLost"
    assert procs.job_processes(job.id) == []


def test_the_processes_of_a_lost_launcher_stop_with_it(store: JobStore) -> None:
    job = api.submit(SLEEPS, store=store, gpus=2, accelerator="cpu")
    _wait_running(job, 2)
    assert len(procs.job_processes(job.id)) >= 3  # the agent and two ranks
    os.kill(int(json.loads((job.dir / "launcher.json").read_text())["pid"]), signal.SIGKILL)
    assert procs.wait_gone(job.id, timeout=60)  # no cancel: they went with the launcher
    assert job.status().reason == "LauncherLost"


def test_dry_run_is_the_exact_request_and_creates_nothing(store: JobStore) -> None:
    spec = JobSpec(name="dry", nproc_per_node=2, env={"FOO": "bar"}, args=["--lr", "0.1"], accelerator="cpu")
    info = LocalBackend(store).dryrun(spec)
    assert not store.job_dir(info.job_id).exists()
    (agent,) = info.request["agents"]
    argv = agent["argv"]
    assert argv[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nnodes=1"]
    assert "--nproc-per-node=2" in argv and argv[-2:] == ["--lr", "0.1"]
    assert agent["env"]["FOO"] == "bar" and agent["env"]["DISTTRAIN_JOB_ID"] == info.job_id
    assert agent["env"]["CUDA_VISIBLE_DEVICES"] == ""
    assert "torch.distributed.run" in info.text and "FOO=bar" in info.text


def test_gpu_jobs_give_each_node_its_own_gpus() -> None:
    spec = JobSpec(name="g", nodes=2, nproc_per_node=2)
    agents = agent_commands(
        spec,
        "g-1",
        "/jobs/g-1",
        python="python",
        rdzv_port=29400,
        gpu_ids=["0", "1", "2", "3"],
        working_dir="/w",
    )
    assert [a.env["CUDA_VISIBLE_DEVICES"] for a in agents] == ["0,1", "2,3"]
    assert "--rdzv-conf=is_host=true" in agents[0].argv and "--rdzv-conf=is_host=false" in agents[1].argv


def test_more_gpus_than_the_machine_has_is_refused(store: JobStore, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(InvalidSpecError, match="needs 4 GPUs and this machine has 2"):
        LocalBackend(store).dryrun(JobSpec(name="g", nproc_per_node=4))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(InvalidSpecError, match="no GPU"):
        LocalBackend(store).dryrun(JobSpec(name="g", accelerator="gpu"))


def test_bad_specs_fail_before_anything_is_created(store: JobStore) -> None:
    with pytest.raises(InvalidSpecError, match="--gpus must be"):
        api.submit("print(1)", store=store, gpus=0)
    with pytest.raises(UnknownBackendError, match="choose one of"):
        api.submit("print(1)", store=store, backend="slurm")
    with pytest.raises(InvalidSpecError, match="Kubernetes option"):
        api.submit("print(1)", store=store, options={"shm_size": "1Gi"})
    assert store.ids() == []


def test_max_restarts_restarts_the_group_and_counts_it(store: JobStore) -> None:
    script = """
import os, sys
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print(f"attempt {attempt} rank {os.environ['RANK']}", flush=True)
sys.exit(3 if attempt == 0 and os.environ["RANK"] == "1" else 0)
"""
    job = api.submit(script, store=store, gpus=2, max_restarts=1)
    status = job.wait(timeout=120)
    assert status.phase is JobPhase.SUCCEEDED, status
    assert [r.restarts for r in status.replicas] == [1, 1]
    assert [ln.text for ln in job.logs("rank-1")] == ["attempt 0 rank 1", "attempt 1 rank 1"]


def test_logs_of_an_unknown_replica_say_which_exist(store: JobStore) -> None:
    job = api.submit("print('hi')", store=store, gpus=1)
    job.wait(timeout=120)
    with pytest.raises(InvalidSpecError, match="has no replica 'rank-7'; it has: agent-0, rank-0"):
        list(job.logs("rank-7"))


def test_a_rank_killed_by_a_signal_is_named_with_its_signal_and_its_peer_stays_terminated(
    store: JobStore,
) -> None:
    script = 'import time, torch.distributed as dist\ndist.init_process_group("gloo")\ntime.sleep(600)\n'
    job = api.submit(script, store=store, gpus=2, accelerator="cpu")
    _wait_running(job, 2)
    os.kill(json.loads((job.dir / "ranks" / "rank-1.json").read_text())["pid"], signal.SIGKILL)
    status = job.wait(timeout=60)
    assert status.phase is JobPhase.FAILED
    # OOMKilled instead when the kernel's OOM killer sent it (its cgroup's oom_kill count grew).
    assert status.reason == "SIGKILL", status
    assert (status.message or "").split("\n")[0] == "rank-1 was killed by SIGKILL"
    ranks = {r.name: r for r in status.replicas}
    assert (ranks["rank-1"].exit_code, ranks["rank-1"].reason) == (-9, "SIGKILL")
    assert (ranks["rank-0"].phase, ranks["rank-0"].reason) == (JobPhase.FAILED, "Terminated")
    assert procs.job_processes(job.id) == []
