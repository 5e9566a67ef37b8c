"""The local backend with real torchrun processes (CPU, gloo)."""

from __future__ import annotations

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.backends.local.backend import LocalBackend
from jupyter_disttrain.backends.local.torchrun import agent_commands
from jupyter_disttrain.model.errors import InvalidSpecError, UnknownBackendError
from jupyter_disttrain.model.specs import JobPhase, JobSpec
from jupyter_disttrain.storage import procs
from jupyter_disttrain.storage.store import JobStore

# Every test on both paths of the local backend: warm (forked from the zygote) and cold.
pytestmark = pytest.mark.usefixtures("start_path")

ALL_REDUCE = """
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"rank={dist.get_rank()} world={dist.get_world_size()} sum={t.item():.0f} "
      f"job={os.environ['DISTTRAIN_JOB_ID']} tb={os.environ['DISTTRAIN_TENSORBOARD_DIR']} "
      f"ckpt={os.environ['DISTTRAIN_CHECKPOINT_DIR']}")
if dist.get_rank() == 0:  # a plain save into the checkpoint dir: it is there from the start
    torch.save({"sum": t}, os.path.join(os.environ["DISTTRAIN_CHECKPOINT_DIR"], "step_1.pt"))
dist.destroy_process_group()
"""


def test_two_rank_gloo_job_all_reduces_and_keeps_per_rank_logs(store: JobStore) -> None:
    job = api.submit(ALL_REDUCE, store=store, gpus=2, name="allreduce")
    status = job.wait(timeout=120)
    assert status.phase is JobPhase.SUCCEEDED, status
    assert [(r.name, r.phase, r.exit_code) for r in status.replicas] == [
        ("rank-0", JobPhase.SUCCEEDED, 0),
        ("rank-1", JobPhase.SUCCEEDED, 0),
    ]
    by_rank = {ln.rank: ln.text for ln in job.logs() if ln.rank is not None}
    tb, ckpt = str(job.dir / "tensorboard"), str(job.dir / "checkpoints")
    assert by_rank == {r: f"rank={r} world=2 sum=3 job={job.id} tb={tb} ckpt={ckpt}" for r in (0, 1)}
    assert (job.dir / "train.py").read_text() == ALL_REDUCE
    assert [(c.step, c.kind, c.complete) for c in job.checkpoints().checkpoints] == [(1, "torch", True)]
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
    assert len(agents) == 2 and all("--rdzv-backend=disttrain-loopback" in a["argv"] for a in agents)


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


def test_dry_run_is_the_exact_request_and_creates_nothing(store: JobStore) -> None:
    spec = JobSpec(name="dry", nproc_per_node=2, env={"FOO": "bar"}, args=["--lr", "0.1"], accelerator="cpu")
    info = LocalBackend(store).dryrun(spec)
    assert not store.job_dir(info.job_id).exists()
    (agent,) = info.request.agents
    argv = agent.argv
    assert argv[1:5] == ["-m", "torch.distributed.run", "--nnodes=1", "--rdzv-backend=disttrain-loopback"]
    assert "--rdzv-endpoint=127.0.0.1:0" in argv and agent.env["GLOO_SOCKET_IFNAME"] == "lo"
    assert "--nproc-per-node=2" in argv and argv[-2:] == ["--lr", "0.1"]
    assert agent.env["FOO"] == "bar" and agent.env["DISTTRAIN_JOB_ID"] == info.job_id
    assert agent.env["CUDA_VISIBLE_DEVICES"] == ""
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
        api.submit("print(1)", store=store, backend="nomad")
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
