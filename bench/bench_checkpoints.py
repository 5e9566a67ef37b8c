"""What indexing checkpoints costs: while a job writes 1,000 of them, and listing 1,000.

1. A writer process saves N torch.save checkpoints (real zips, each written to a temporary name
   and renamed, as torch.save through a path does not: written in place, so partial files are
   seen too) into a job's checkpoint dir over W seconds, and logs an em point per checkpoint.
   Meanwhile this process indexes as the product does: the server's listing every POLL seconds
   (``JobManager.checkpoints``: what the lab's list and the details poll) and the retention
   thread's scan every ``retention.INTERVAL`` seconds. Printed: the indexer's CPU seconds per
   wall second (budget: 1 % of a core) and its ratio to the budget.
2. Listing the 1,000 (``JobManager.checkpoints``, then the JSON): the first (cold) listing and
   the median of the next ones, in ms.
3. A listing's bound (issue 34): a job whose runs declared 50 directories that are one
   directory of 2,000 checkpoints by other names (links above it) and its parent. Printed: the
   checkpoints listed (each once) against the 102,000 an unbounded index listed, the answer's
   bytes and the median listing time; then the same with 10x the files, where the one entry
   budget (20,000 directory entries for the dir and every declared path together) stops the
   listing (``usage.more``).

    python bench/bench_checkpoints.py [--count 1000] [--seconds 30] [--poll 5] [--declared-only]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jupyter_disttrain.jobs.manager import JobManager
from jupyter_disttrain.model.specs import JobSpec
from jupyter_disttrain.payloads import to_json
from jupyter_disttrain.runtime import ckptscan, contract, retention
from jupyter_disttrain.storage.store import JobRecord, JobStore

WRITER = """
import io, json, os, sys, time, torch
ckpts, metrics, count, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
buffer = io.BytesIO()
torch.save({"w": torch.zeros(256)}, buffer)
data = buffer.getvalue()
os.makedirs(ckpts, exist_ok=True)
start = time.monotonic()
with open(metrics, "a") as points:
    for step in range(1, count + 1):
        with open(os.path.join(ckpts, f"step_{step}.pt"), "wb") as f:
            f.write(data)
        points.write(json.dumps({"type": "train", "name": "loss", "value": 1 / step, "step": step,
                                 "time": time.time()}) + "\\n")
        points.flush()
        time.sleep(max(0.0, start + step * seconds / count - time.monotonic()))
"""


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def make_job(root: Path) -> tuple[JobManager, str, Path]:
    store = JobStore(root)
    store.create(JobRecord(id="bench-ckpt1", spec=JobSpec(name="bench", keep_checkpoints=0)), "print(1)\n")
    job_dir = store.job_dir("bench-ckpt1")
    run = job_dir / contract.RUNS_DIR / "train"
    run.mkdir(parents=True)
    (run / contract.RUN_FILE).write_text(json.dumps({"name": "train"}))
    return JobManager(store, "local"), "bench-ckpt1", job_dir


def while_writing(count: int, seconds: float, poll: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        manager, job_id, job_dir = make_job(Path(tmp) / "jobs")
        ckpts = job_dir / contract.CHECKPOINTS_DIR
        metrics = job_dir / contract.RUNS_DIR / "train" / contract.METRICS_FILE
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(ckpts), str(metrics), str(count), str(seconds)]
        )
        start_wall, start_cpu = time.monotonic(), cpu()
        next_list = next_scan = start_wall
        listings = scans = 0
        while writer.poll() is None:
            now = time.monotonic()
            if now >= next_list:
                manager.checkpoints(job_id)
                listings, next_list = listings + 1, next_list + poll
            if now >= next_scan:  # what rank 0's retention thread does each interval
                retention.prune(str(ckpts), 0, retention.pinned(str(job_dir)))
                ckptscan.scan(str(ckpts))
                scans, next_scan = scans + 1, next_scan + retention.INTERVAL
            time.sleep(max(0.0, min(next_list, next_scan, now + 0.5) - time.monotonic()))
        wall, used = time.monotonic() - start_wall, cpu() - start_cpu
        found = len(manager.checkpoints(job_id).checkpoints)
    share = used / wall
    print(f"while writing {count} checkpoints over {wall:.1f} s ({found} listed at the end):")
    print(f"  indexer CPU {used:.3f} s in {listings} listings (every {poll:g} s) and {scans} retention scans")
    print(f"  = {share * 100:.3f} % of a core; budget 1 %: ratio {share / 0.01:.2f}")


def listing(count: int, repeat: int = 10) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        manager, job_id, job_dir = make_job(Path(tmp) / "jobs")
        ckpts = job_dir / contract.CHECKPOINTS_DIR
        metrics = job_dir / contract.RUNS_DIR / "train" / contract.METRICS_FILE
        subprocess.run([sys.executable, "-c", WRITER, str(ckpts), str(metrics), str(count), "0"], check=True)
        old = time.time() - 60
        for name in os.listdir(ckpts):
            os.utime(ckpts / name, (old, old))
        t = time.perf_counter()
        first = to_json(manager.checkpoints(job_id))
        cold = (time.perf_counter() - t) * 1000
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            json.dumps(to_json(manager.checkpoints(job_id)))
            times.append((time.perf_counter() - t) * 1000)
    warm = statistics.median(times)
    print(f"listing {len(first['checkpoints'])} checkpoints: first {cold:.1f} ms, then median {warm:.1f} ms")
    per = warm / len(first["checkpoints"]) * 1000
    print(f"  = {per:.1f} us per checkpoint; ratio first/next {cold / warm:.2f}")


def declared(files: int, views: int = 50, repeat: int = 5) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        manager, job_id, job_dir = make_job(Path(tmp) / "jobs")
        real = Path(tmp) / "data" / "ckpts"
        subprocess.run([sys.executable, "-c", WRITER, str(real), os.devnull, str(files), "0"], check=True)
        old = time.time() - 60
        for name in os.listdir(real):
            os.utime(real / name, (old, old))
        (Path(tmp) / "links").mkdir()
        paths = [real.parent, real]
        for index in range(views):
            os.symlink(real.parent, Path(tmp) / "links" / f"l{index}")
            paths.append(Path(tmp) / "links" / f"l{index}" / "ckpts")
        lines = "".join(json.dumps({"path": str(p)}) + "\n" for p in paths)
        (job_dir / contract.RUNS_DIR / "train" / contract.CHECKPOINTS_FILE).write_text(lines)
        times, answer = [], ""
        for _ in range(repeat):
            t = time.perf_counter()
            answer = json.dumps(to_json(manager.checkpoints(job_id)))
            times.append((time.perf_counter() - t) * 1000)
    listed = json.loads(answer)
    count, unbounded = len(listed["checkpoints"]), files * len(paths)
    print(
        f"{len(paths)} declared paths over {files} checkpoints: {count} listed (unbounded: {unbounded}; "
        f"ratio {count / unbounded:.3f}), more={listed['usage']['more']}, {len(answer) / 1e6:.2f} MB, "
        f"median {statistics.median(times):.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--poll", type=float, default=5.0, help="seconds between listings (the lab's poll)")
    parser.add_argument("--declared-only", action="store_true", help="only the listing's bound (3.)")
    args = parser.parse_args()
    if not args.declared_only:
        while_writing(args.count, args.seconds, args.poll)
        listing(args.count)
    declared(2000)
    declared(30000, repeat=2)


if __name__ == "__main__":
    main()
