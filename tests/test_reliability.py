"""Local jobs under faults, end to end with real torchrun processes (issue 9: 1, 7, 8, 9, 10).

kill -9 of the launcher, of an agent and of one rank; ranks that ignore SIGTERM; a disk that
fills up under a running job; a job dir renamed by hand; and no socket of a job that another
host could reach. Every case ends with no process of the job left.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from jupyter_disttrain import api
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage import procs
from jupyter_disttrain.storage.store import JobStore

# Every test on both paths of the local backend: warm (forked from the zygote) and cold.
pytestmark = pytest.mark.usefixtures("start_path")

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

# Ranks that meet in a process group, then wait: every socket the job opens is open by then.
MEETS_THEN_SLEEPS = """
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
print("sum", int(t.item()), flush=True)
time.sleep(600)
"""


def _until(job: api.Job, done: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, job.status()
        time.sleep(0.05)


def _wait_running(job: api.Job, ranks: int, timeout: float = 60) -> None:
    _until(job, lambda: job.status().replicas_ready >= ranks, timeout)


def _wait_started(job: api.Job, ranks: int, timeout: float = 60) -> None:
    """Until ``ranks`` ranks printed their "started" line: a ready rank may not have run its
    script's first lines yet (under load, a SIGTERM then finds no SIG_IGN set)."""
    _until(job, lambda: sum("started" in line.text for line in job.logs()) >= ranks, timeout)


def _wait_phase(job: api.Job, phase: JobPhase, timeout: float = 60) -> None:
    _until(job, lambda: job.status().phase is phase, timeout)


def _launcher_pid(job: api.Job) -> int:
    return int(json.loads((job.dir / "launcher.json").read_text())["pid"])


def _rank_pid(job: api.Job, rank: int) -> int:
    return int(json.loads((job.dir / "ranks" / f"rank-{rank}.json").read_text())["pid"])


def _agent_pid(job: api.Job, node: int) -> int:
    """The torchrun agent of ``node`` (the launcher's child, or a fork of the warm zygote): the
    job's process of that node that is no rank."""
    for proc in procs.job_processes(job.id, exclude=[_launcher_pid(job)]):
        with contextlib.suppress(psutil.Error):
            env = proc.environ()
            if env.get("DISTTRAIN_NODE") == str(node) and "RANK" not in env:
                return proc.pid
    raise AssertionError(f"no agent of node {node}")


# -- kill -9 -------------------------------------------------------------------------------------
def test_a_killed_launcher_is_reported_and_cancel_still_stops_what_ignores_sigterm(store: JobStore) -> None:
    job = api.submit(IGNORES_TERM, store=store, gpus=1, options={"grace_period": 0.5})
    _wait_running(job, 1)
    _wait_started(job, 1)
    os.kill(_launcher_pid(job), signal.SIGKILL)
    _wait_phase(job, JobPhase.FAILED, timeout=10)
    assert job.status().reason == "LauncherLost"
    # Its rank ignores the SIGTERM its agent passed on when the launcher died: a cancel of the
    # ended job still finds and stops it.
    assert procs.job_processes(job.id)
    assert [r.phase for r in job.status().replicas] == [JobPhase.RUNNING]  # it does run on
    assert job.cancel().reason == "LauncherLost"
    assert procs.job_processes(job.id) == []
    (rank,) = job.status().replicas  # ended now that its process is gone
    assert (rank.phase, rank.reason, rank.ready) == (JobPhase.FAILED, "LauncherLost", False), rank


def test_the_processes_of_a_killed_launcher_stop_with_it(store: JobStore) -> None:
    job = api.submit(SLEEPS, store=store, gpus=2, accelerator="cpu")
    _wait_running(job, 2)
    assert len(procs.job_processes(job.id)) >= 3  # the agent and two ranks
    os.kill(_launcher_pid(job), signal.SIGKILL)
    assert procs.wait_gone(job.id, timeout=60)  # no cancel: they went with the launcher
    status = job.status()
    assert status.reason == "LauncherLost"
    # No replica reads Running once no process is left.
    assert [(r.phase, r.reason) for r in status.replicas] == [(JobPhase.FAILED, "LauncherLost")] * 2, status
    assert all(r.finish_time and not r.ready for r in status.replicas)


def test_a_killed_agent_is_named_and_its_peers_stop(store: JobStore) -> None:
    job = api.submit(MEETS_THEN_SLEEPS, store=store, gpus=1, nodes=2, accelerator="cpu")
    _wait_running(job, 2)
    os.kill(_agent_pid(job, 1), signal.SIGKILL)
    status = job.wait(timeout=60)
    assert (status.phase, status.reason) == (JobPhase.FAILED, "SIGKILL"), status
    assert status.message == "the torchrun agent of node-1 was killed by SIGKILL"
    assert procs.job_processes(job.id) == []  # its ranks, orphaned, were swept too


def test_a_killed_rank_is_named_with_its_signal_and_its_peer_stays_terminated(store: JobStore) -> None:
    job = api.submit(MEETS_THEN_SLEEPS, store=store, gpus=2, accelerator="cpu")
    _wait_running(job, 2)
    os.kill(_rank_pid(job, 1), signal.SIGKILL)
    status = job.wait(timeout=60)
    assert status.phase is JobPhase.FAILED
    # OOMKilled instead when the kernel's OOM killer sent it (its cgroup's oom_kill count grew).
    assert status.reason == "SIGKILL", status
    assert (status.message or "").split("\n")[0] == "rank-1 was killed by SIGKILL"
    ranks = {r.name: r for r in status.replicas}
    assert (ranks["rank-1"].exit_code, ranks["rank-1"].reason) == (-9, "SIGKILL")
    assert (ranks["rank-0"].phase, ranks["rank-0"].reason) == (JobPhase.FAILED, "Terminated")
    assert procs.job_processes(job.id) == []


def test_cancel_stops_ranks_that_ignore_sigterm(store: JobStore) -> None:
    job = api.submit(IGNORES_TERM, store=store, gpus=2, options={"grace_period": 1.0})
    _wait_running(job, 2)
    _wait_started(job, 2)
    assert len(procs.job_processes(job.id)) >= 3  # agent + 2 workers
    status = job.cancel()
    assert status.phase is JobPhase.CANCELLED
    assert {r.phase for r in status.replicas} == {JobPhase.CANCELLED}
    assert procs.job_processes(job.id) == []
    assert job.cancel().phase is JobPhase.CANCELLED  # idempotent


# -- a full disk ---------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs (root only: skipped where mounting is not allowed)."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    tried = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if tried.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {tried.stderr.strip() or tried.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(path: Path) -> None:
    """Write to ``path`` until not one more byte fits."""
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 16, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"x" * chunk)


def test_a_disk_that_fills_up_fails_the_job_with_disk_full(small_disk: Path) -> None:
    store = JobStore(small_disk / "jobs")
    job = api.submit(SLEEPS, store=store, gpus=1, accelerator="cpu")
    _wait_running(job, 1)
    _wait_started(job, 1)  # its line written before the disk fills
    # The disk fills up under the running job, then it fails (its rank killed here): the
    # launcher writes the end in the room it kept and names the full disk as the reason.
    _fill(small_disk / "fill.bin")
    assert shutil.disk_usage(small_disk).free == 0
    os.kill(_rank_pid(job, 0), signal.SIGKILL)
    status = job.wait(timeout=60)
    assert (status.phase, status.reason) == (JobPhase.FAILED, "DiskFull"), status
    assert (status.message or "").startswith(f"the job's disk is full ({store.root}): ")
    assert procs.job_processes(job.id) == []
    # The status reader never writes: listing and reading logs work on the full disk.
    assert [s.job_id for s in api.list_jobs(store)] == [job.id]
    assert any("started" in line.text for line in job.logs())


def test_a_launcher_that_cannot_write_stops_the_job_and_says_why(small_disk: Path) -> None:
    store = JobStore(small_disk / "jobs")
    # Room for the job's files but not for the launcher's reserve: the launcher cannot keep the
    # status true, so it stops the job at once and writes why in what is left.
    _fill(small_disk / "fill.bin")
    os.truncate(small_disk / "fill.bin", (small_disk / "fill.bin").stat().st_size - 256 * 1024)
    job = api.submit(SLEEPS, store=store, gpus=1, accelerator="cpu")
    status = job.wait(timeout=60)
    assert (status.phase, status.reason) == (JobPhase.FAILED, "DiskFull"), status
    assert (status.message or "").startswith(f"No space left on device writing {job.dir}")
    assert procs.job_processes(job.id) == []


# -- a job dir renamed by hand -------------------------------------------------------------------
def test_a_renamed_job_dir_is_skipped_by_the_list_and_the_cli(store: JobStore) -> None:
    kept = api.submit("print('kept')", store=store, gpus=1)
    moved = api.submit("print('moved')", store=store, gpus=1)
    assert kept.wait(timeout=120).phase is moved.wait(timeout=120).phase is JobPhase.SUCCEEDED
    os.rename(moved.dir, store.root / "renamed-by-hand")
    assert [s.job_id for s in api.list_jobs(store)] == [kept.id]
    cli = subprocess.run(
        [sys.executable, "-m", "jupyter_disttrain.cli", "--root", str(store.root), "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert kept.id in cli.stdout and "renamed-by-hand" not in cli.stdout
    assert "renamed-by-hand" in cli.stderr  # the warning says which dir was skipped


# -- nothing of a job listens beyond loopback ----------------------------------------------------
def _listening(pids: set[int]) -> list[tuple[int, str, int]]:
    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            for conn in psutil.Process(pid).net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((pid, conn.laddr.ip, conn.laddr.port))
    return found


@pytest.mark.parametrize(("gpus", "nodes"), [(2, 1), (2, 2)])
def test_no_socket_of_a_local_job_listens_beyond_loopback(store: JobStore, gpus: int, nodes: int) -> None:
    job = api.submit(
        MEETS_THEN_SLEEPS,
        store=store,
        gpus=gpus,
        nodes=nodes,
        accelerator="cpu",
        options={"oversubscribe": True},
    )
    try:
        _wait_running(job, gpus * nodes)
        deadline = time.monotonic() + 60
        while sum("sum" in line.text for line in job.logs()) < gpus * nodes:
            assert time.monotonic() < deadline, job.status()
            time.sleep(0.1)
        launcher = psutil.Process(_launcher_pid(job))
        pids = {launcher.pid, *(p.pid for p in launcher.children(recursive=True))}
        pids |= {p.pid for p in procs.job_processes(job.id)}
        sockets = _listening(pids)
        # The rendezvous store, the store the workers share, gloo's pairs: all there, all loopback.
        assert len(sockets) >= 1 + gpus * nodes, sockets
        assert [s for s in sockets if not ipaddress.ip_address(s[1]).is_loopback] == []
    finally:
        job.cancel()
    assert procs.job_processes(job.id) == []
