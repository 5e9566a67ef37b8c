"""Warm steps inside an allocation, on the test cluster: the first job starts one long-lived
``srun`` step on its node holding the zygote, a re-run forks from it (no new step, torch already
imported, its own changed script, a notebook module's state fresh), a cancelled one leaves the
step usable, a refused one runs cold saying why, the step ends by itself once idle, and a step
ended mid-run fails its job naming it (docs/warm-start.md, "Warm on the cluster")."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from jupyter_disttrain import api
from jupyter_disttrain.backends.slurm.script import START
from jupyter_disttrain.backends.slurm.warmstep import WARMSTEP_MODULE
from jupyter_disttrain.jobs import warmup
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage import procs
from jupyter_disttrain.storage.store import JobStore

from .cluster import SlurmCluster
from .conftest import wait_for, wait_phase

pytestmark = pytest.mark.slurm

# The module state a re-run must not inherit, and the step and process each run is in.
SCRIPT = """
import os, sys
held = "torch" in sys.modules  # imported ahead by the zygote: a warm rank's, not a cold one's
import torch.distributed as dist
import counted
dist.init_process_group("gloo")
counted.COUNT += 1
print("{word} count", counted.COUNT, "rank", dist.get_rank(), "held", held,
      "step", os.environ["SLURM_STEP_ID"], flush=True)
{wait}
dist.destroy_process_group()
"""
WAIT = "import time\nwhile True:\n    time.sleep(0.1)"  # until cancelled
# Rank 1 fails the first attempt, once both printed: --max-restarts 1 restarts the group.
RESTARTS = """
import os, sys
import torch.distributed as dist
dist.init_process_group("gloo")
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
print("restart attempt", attempt, "rank", dist.get_rank(), "step", os.environ["SLURM_STEP_ID"], flush=True)
dist.barrier()
if attempt == "0" and dist.get_rank() == 1:
    sys.exit(3)
dist.destroy_process_group()
"""
KEEP = "15s"  # the warm step's idle time: a re-run comes sooner, the release is waited for


@pytest.fixture
def allocation(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A one-node allocation held by ``salloc --no-shell``, which this test process is 'inside'
    (as a kernel started in salloc): the jobs it submits run as its job steps."""
    done = slurm_cluster.run("salloc", "--no-shell", "--nodes=1", "--job-name=warm-alloc", timeout=60)
    found = re.search(r"allocation (\d+)", done.stderr + done.stdout)
    assert found, done.stderr
    monkeypatch.setenv("SLURM_JOB_ID", found.group(1))
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    yield found.group(1)
    slurm_cluster.run("scancel", found.group(1), check=False)


def steps(cluster: SlurmCluster, allocation: str) -> list[str]:
    """The allocation's running steps, as ``ID NAME``."""
    out = cluster.run("squeue", "--steps", "--noheader", f"--jobs={allocation}", "--format=%i %j")
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def job_words(tmp_path: Path) -> dict[str, object]:
    return {"backend": "slurm", "gpus": 2, "working_dir": str(tmp_path), "options": {"keep_warm": KEEP}}


def submit(store: JobStore, tmp_path: Path, word: str, wait: str = "") -> api.Job:
    return api.submit(SCRIPT.format(word=word, wait=wait), store=store, **job_words(tmp_path))


def run(store: JobStore, tmp_path: Path, word: str) -> tuple[api.Job, list[str]]:
    job = submit(store, tmp_path, word)
    status = wait_phase(job, {JobPhase.SUCCEEDED, JobPhase.FAILED}, timeout=240)
    logs = [ln.text for ln in job.logs()]
    assert status.phase is JobPhase.SUCCEEDED, (status.message, logs[-20:])
    return job, [line for line in logs if f"{word} count" in line]


def counts(job: api.Job, word: str) -> list[str]:
    return sorted(ln.text for ln in job.logs() if f"{word} count" in ln.text)


def alive(*words: str) -> list[str]:
    """Command lines of this user's processes that name all of ``words``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if all(w in cmdline for w in words):
            found.append(cmdline)
    return found


def test_a_rerun_forks_from_the_warm_step_and_the_step_ends_when_idle(
    tmp_path: Path, store: JobStore, slurm_cluster: SlurmCluster, allocation: str
) -> None:
    (tmp_path / "counted.py").write_text("COUNT = 0\n")
    for words, why in [
        ({"options": {"cold": True}}, "--cold"),
        ({"options": {"keep_warm": 0}}, "--keep-warm 0"),
        ({"env": {"TORCH_SHOW_CPP_STACKTRACES": "1"}}, "TORCH_SHOW_CPP_STACKTRACES is read when Python"),
    ]:
        dry = api.dryrun("print(1)", store=store, **{**job_words(tmp_path), **words})
        assert f"# start: {START} ({why}" in dry.text, dry.text
    dry = api.dryrun("print(1)", store=store, **job_words(tmp_path))
    assert "# start: warm: a warm step starts on each node now" in dry.text, dry.text
    keeper_socket = dry.request.warm["socket"]  # type: ignore[attr-defined]

    first, lines = run(store, tmp_path, "first")
    (started,) = [e.message for e in first.status().events if e.reason == "Started"]
    assert "warm: forked from the warm step started for it on each node (re-runs start no" in started
    (warm_step,) = steps(slurm_cluster, allocation)
    step_id = warm_step.split()[0].rpartition(".")[2]
    assert warm_step.endswith("disttrain-warm"), warm_step
    assert sorted(lines) == [f"first count 1 rank {r} held True step {step_id}" for r in (0, 1)], lines

    dry = api.dryrun("print(1)", store=store, **job_words(tmp_path))
    assert "# start: warm: forked from the warm step on each node (no new step" in dry.text, dry.text
    # A re-run, its script changed, cancelled while it runs: its ranks go, the warm step stays.
    second = submit(store, tmp_path, "second", WAIT)
    expected = [f"second count 1 rank {r} held True step {step_id}" for r in (0, 1)]
    wait_for(lambda: counts(second, "second") == expected, 120, "the second run's ranks printed")
    (started,) = [e.message for e in second.status().events if e.reason == "Started"]
    assert "warm: forked from the warm step on each node (no new step)" in started, started
    assert second.cancel().phase is JobPhase.CANCELLED
    wait_for(lambda: not procs.job_processes(second.id), 60, "the cancelled run's processes ended")
    assert steps(slurm_cluster, allocation) == [warm_step]  # none started for it, the warm one kept

    _, lines = run(store, tmp_path, "third")
    assert sorted(lines) == [f"third count 1 rank {r} held True step {step_id}" for r in (0, 1)], lines
    assert steps(slurm_cluster, allocation) == [warm_step]

    # --max-restarts in the warm step: the failed attempt's ranks stopped, fresh ones forked there.
    restarted = api.submit(RESTARTS, store=store, **{**job_words(tmp_path), "max_restarts": 1})
    status = wait_phase(restarted, {JobPhase.SUCCEEDED, JobPhase.FAILED}, timeout=240)
    said = sorted(ln.text for ln in restarted.logs() if ln.text.startswith("restart attempt"))
    assert status.phase is JobPhase.SUCCEEDED, (status.message, said)
    (started,) = [e.message for e in status.events if e.reason == "Started"]
    assert "warm: forked from the warm step on each node (no new step)" in started, started
    assert said == [f"restart attempt {a} rank {r} step {step_id}" for a in (0, 1) for r in (0, 1)], said
    assert steps(slurm_cluster, allocation) == [warm_step]

    # A job the warm step's zygote refuses (beside it, another copy of a module the zygote holds)
    # runs cold in a step of its own, saying why; the warm step stays.
    other = tmp_path / "other"
    other.mkdir()
    (other / "counted.py").write_text("COUNT = 0\n")
    (other / "threadpoolctl.py").write_text("")
    refused = api.submit(SCRIPT.format(word="fourth", wait=""), store=store, **job_words(other))
    assert wait_phase(refused, {JobPhase.SUCCEEDED, JobPhase.FAILED}, 240).phase is JobPhase.SUCCEEDED
    (started,) = [e.message for e in refused.status().events if e.reason == "Started"]
    assert "cold: one srun step per node, the warm step could not start it (" in started, started
    assert "threadpoolctl.py would replace the threadpoolctl the zygote imported" in started, started
    (line,) = [t for t in counts(refused, "fourth") if "rank 0" in t]
    assert "held False" in line and f"step {step_id}" not in line, line

    # Idle for KEEP: the warm step ends by itself, and its zygote and the keeper with it.
    wait_for(lambda: not steps(slurm_cluster, allocation), 90, "the warm step ended when idle")
    wait_for(lambda: not alive("keeper", keeper_socket), 30, "the keeper ended with its last step")
    wait_for(lambda: not alive("zygote", f"slurm-{allocation}.{step_id}"), 30, "the step's zygote ended")

    # The next job starts a new warm step; that step ended mid-run (scancel) fails the job, naming
    # it, and nothing hangs.
    lost = submit(store, tmp_path, "fifth", WAIT)
    wait_for(lambda: len(counts(lost, "fifth")) == 2, 120, "the fifth run's ranks printed")
    (new_step,) = steps(slurm_cluster, allocation)
    assert new_step != warm_step and new_step.endswith("disttrain-warm"), new_step
    slurm_cluster.run("scancel", new_step.split()[0])
    assert wait_phase(lost, {JobPhase.SUCCEEDED, JobPhase.FAILED}, 60).phase is JobPhase.FAILED
    (said,) = [e.message for e in lost.status().events if e.reason == "WarmStepLost"]
    assert said.startswith(f"the warm step {new_step.split()[0]} on "), said
    assert lost.status().message == said  # why it failed
    wait_for(lambda: not alive("keeper", keeper_socket), 30, "the keeper ended with its last step")


def test_a_node_whose_environment_differs_forks_no_job(slurm_cluster: SlurmCluster, allocation: str) -> None:
    """A warm step started for a kernel of another venv (or one installed into since) starts no
    zygote and refuses each job, saying why (the launcher then runs it cold, saying so)."""
    argv = ["srun", f"--jobid={allocation}", "--overlap", "--nodes=1", "--ntasks=1", "--unbuffered"]
    argv += [sys.executable, "-u", "-m", WARMSTEP_MODULE, "0" * 20, "key", "30", "another-venv"]
    spawn = {"c": 1, "m": {"op": "spawn", "job_dir": "/nonexistent", "node": 0}}
    done = subprocess.run(
        argv,
        input=json.dumps(spawn) + "\n",
        env=slurm_cluster.client_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    assert frames[0]["c"] == 0 and "hello" in frames[0]["m"], frames
    (answer,) = [f["m"] for f in frames if f["c"] == 1]
    assert answer["ok"] is False, answer
    assert re.match(r"node \S+'s Python environment differs from the kernel's \(", answer["error"]), answer
    assert not alive("zygote", f"slurm-{allocation}.")  # none was started for it


def test_load_ext_starts_node_0s_warm_step_ahead(
    tmp_path: Path,
    store: JobStore,
    slurm_cluster: SlurmCluster,
    allocation: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a kernel inside an allocation whose default backend is Slurm, ``%load_ext`` (its
    ``warmup.start``) starts node 0's warm step without a job: even the first job forks from it."""
    monkeypatch.setenv("DISTTRAIN_BACKEND", "slurm")
    assert warmup.start(os.environ) is None  # no local zygote: this kernel's jobs go to its allocation
    (warm_step,) = wait_for(lambda: steps(slurm_cluster, allocation), 60, "node 0's warm step started ahead")
    assert warm_step.endswith("disttrain-warm"), warm_step
    (tmp_path / "counted.py").write_text("COUNT = 0\n")
    dry = api.dryrun("print(1)", store=store, **job_words(tmp_path))
    assert "# start: warm: forked from the warm step on each node (no new step" in dry.text, dry.text
    first, lines = run(store, tmp_path, "first")
    (started,) = [e.message for e in first.status().events if e.reason == "Started"]
    assert "warm: forked from the warm step on each node (no new step)" in started, started
    step_id = warm_step.split()[0].rpartition(".")[2]
    assert sorted(lines) == [f"first count 1 rank {r} held True step {step_id}" for r in (0, 1)], lines
    assert steps(slurm_cluster, allocation) == [warm_step]


TWO_NODES = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
print("{word} rank", dist.get_rank(), "group", os.environ["GROUP_RANK"], "of", os.environ["GROUP_WORLD_SIZE"],
      "node", os.environ["SLURMD_NODENAME"], "sum", total.item(), flush=True)
dist.destroy_process_group()
"""


def test_a_two_node_job_forks_each_nodes_agent_from_its_warm_step(
    tmp_path: Path, store: JobStore, slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = slurm_cluster.run("salloc", "--no-shell", "--nodes=2", "--job-name=warm-two", timeout=60)
    found = re.search(r"allocation (\d+)", done.stderr + done.stdout)
    assert found, done.stderr
    monkeypatch.setenv("SLURM_JOB_ID", found.group(1))
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    words = {**job_words(tmp_path), "gpus": 1, "nodes": 2}
    try:
        dry = api.dryrun("print(1)", store=store, **words)
        assert "# start: warm: a warm step starts on each node now" in dry.text, dry.text
        nodes: set[str] = set()
        for word, how in [("first", "started for it on each node"), ("again", "on each node (no new step)")]:
            job = api.submit(TWO_NODES.format(word=word), store=store, **words)
            status = wait_phase(job, {JobPhase.SUCCEEDED, JobPhase.FAILED}, timeout=240)
            logs = [ln.text for ln in job.logs()]
            assert status.phase is JobPhase.SUCCEEDED, (status.message, logs[-20:])
            (started,) = [e.message for e in status.events if e.reason == "Started"]
            assert f"warm: forked from the warm step {how}" in started, started
            lines = sorted(t.partition(f"{word} rank ")[2] for t in logs if f"{word} rank" in t)
            assert [line.split()[:4] + line.split()[-2:] for line in lines] == [
                [str(r), "group", str(r), "of", "sum", "3.0"] for r in (0, 1)
            ], lines
            nodes.update(line.split()[6] for line in lines)
            warm_steps = [s for s in steps(slurm_cluster, found.group(1)) if s.endswith("disttrain-warm")]
            assert len(warm_steps) == 2, warm_steps  # one per node, the re-run started none
        assert len(nodes) == 2, nodes  # each rank on its own node
        # One the warm steps refuse (a module beside it that their zygotes hold) runs cold, its
        # agents meeting afresh: not at the rendezvous node 0's warm step had recorded for it.
        other = tmp_path / "other"
        other.mkdir()
        (other / "threadpoolctl.py").write_text("")
        refused = api.submit(
            TWO_NODES.format(word="cold"), store=store, **{**words, "working_dir": str(other)}
        )
        status = wait_phase(refused, {JobPhase.SUCCEEDED, JobPhase.FAILED}, timeout=240)
        assert status.phase is JobPhase.SUCCEEDED, (status.message, [ln.text for ln in refused.logs()][-20:])
        (started,) = [e.message for e in status.events if e.reason == "Started"]
        assert "cold: one srun step per node, the warm step could not start it (" in started, started
        said = [ln.text for ln in refused.logs() if "cold rank" in ln.text]
        assert sorted(t.rpartition("sum ")[2] for t in said) == ["3.0", "3.0"], said
        # Whichever node's cold step looked first (the sums above hold when node 0's came first):
        # the rendezvous node 0's warm step recorded before the refusal stays unread, and both cold
        # nodes name a run of their own.
        slurm_dir = refused.dir / "slurm"
        recorded = {p.stem.removeprefix("rdzv-") for p in slurm_dir.glob("rdzv-*.json")}
        runs = {json.loads(p.read_text())["run"] for p in (slurm_dir / "nodes").glob("node-*.json")}
        assert len(runs) == 1 and len(recorded) == 2 and runs < recorded, (runs, recorded)
    finally:
        slurm_cluster.run("scancel", found.group(1), check=False)
