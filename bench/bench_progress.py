"""What a running job's progress costs the job list and its details, when its log is hostile.

20 local jobs "running" under this (live) process's pid, as ``bench_list_jobs.py`` makes them;
each rank-0 log ends in 16 KiB lines of undecodable bytes and no bar (the worst case for the
bar's reader: before issue 34 its pattern backtracked quadratically on such a line, 3.6 s at
8,000 characters), or in a megabyte without a newline. ``JobManager.list_jobs`` (what ``GET
jobs`` and ``jupyter disttrain list`` run) and ``JobManager.detail`` of one job (``GET
jobs/<id>``) are timed: the median of ``--rounds``, and its ratio to the 50 ms target. The
first listing builds every summary; the timed ones redo the running jobs' (all 20).

    python bench/bench_progress.py [--jobs 20] [--rounds 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from jupyter_disttrain.jobs.manager import JobManager  # noqa: E402
from jupyter_disttrain.model.specs import JobPhase, JobSpec, JobStatus, ReplicaStatus  # noqa: E402
from jupyter_disttrain.storage.store import JobRecord, JobStore, write_record  # noqa: E402

TARGET_MS = 50.0
LOGS = {
    "short lines and a tqdm bar (the usual)": b"epoch 1 loss 0.5\n" * 19
    + b"\r 40%|####      | 4/10 [00:04<00:06,  1.00it/s]\r",
    "20 lines of 16 KiB": (b"\xff" * (16 * 1024) + b"\n") * 20,
    "1 MiB, no newline": b"\xff" * (1 << 20),
}


def fill(store: JobStore, count: int, log: bytes) -> list[str]:
    import psutil

    launcher = {"pid": os.getpid(), "create_time": float(psutil.Process().create_time())}
    ids = []
    for _ in range(count):
        spec = JobSpec(name="hostile", nproc_per_node=1, accelerator="cpu")
        record = JobRecord(id=store.new_job_id(spec.name), spec=spec, request={"device": "cpu"})
        store.create(record, "print('hello')\n")
        replicas = [ReplicaStatus(name="rank-0", phase=JobPhase.RUNNING)]
        status = JobStatus(
            job_id=record.id, phase=JobPhase.RUNNING, replicas=replicas, created=record.created
        )
        store.write_status(status)
        job_dir = store.job_dir(record.id)
        write_record(job_dir / "launcher.json", launcher)
        (job_dir / "logs").mkdir(exist_ok=True)
        (job_dir / "logs" / "rank-0.log").write_bytes(log)
        ids.append(record.id)
    return ids


def median_ms(fn: object, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(log: bytes, jobs: int, rounds: int) -> tuple[float, float]:
    """(list, detail) medians in ms over ``jobs`` running jobs whose rank-0 log is ``log``."""
    with tempfile.TemporaryDirectory(prefix="bench-progress-") as tmp:
        store = JobStore(Path(tmp) / "jobs")
        ids = fill(store, jobs, log)
        manager = JobManager(store, "local")
        listed = manager.list_jobs()
        phases = [job.status.phase for job in listed]
        assert len(listed) == jobs and set(phases) == {JobPhase.RUNNING}, phases
        return median_ms(manager.list_jobs, rounds), median_ms(lambda: manager.detail(ids[0]), rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    usual: tuple[float, float] | None = None
    for what, log in LOGS.items():
        listing, detail = measure(log, args.jobs, args.rounds)
        usual = usual or (listing, detail)
        print(f"{args.jobs} running jobs, rank-0 logs ending in {what}:")
        for name, ms, base in (("list", listing, usual[0]), ("detail", detail, usual[1])):
            target = f"ratio to the {TARGET_MS:g} ms target {ms / TARGET_MS:.2f}"
            print(f"  {name:<6} median {ms:6.1f} ms; {target}, to the usual log {ms / base:.2f}")


if __name__ == "__main__":
    main()
