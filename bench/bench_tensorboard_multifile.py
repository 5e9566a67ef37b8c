"""TensorBoard's CPU over ``_all`` with 50 finished jobs: --reload_multifile on against off.

The store holds 50 finished jobs, each with two writers' event files in one run directory
(as a user's SummaryWriter next to a logger leaves them), last written ``--age`` seconds ago.
TensorBoard runs exactly as the server runs ``_all`` (``TensorBoardManager.flags``: Unix
socket, Python loader, reload every second), once per setting of
``--reload_multifile_inactive_secs``; after it has loaded everything, its CPU time over
``--seconds`` is measured (its reload loop is all it does: nobody requests anything).

    python bench/bench_tensorboard_multifile.py [--jobs 50] [--age 7200] [--seconds 20]

Settings: 0 (multifile off: only the newest file of each run is polled), 3600, 86400 (the
server's default, ``DistTrainApp.tensorboard_multifile_inactive_secs``) and -1 (every file,
forever). The jobs' files are 2 h old: 3600 skips them, 86400 and -1 keep polling them.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from jupyter_disttrain.model.specs import JobSpec  # noqa: E402
from jupyter_disttrain.server.tensorboard import ALL_JOBS, TB_SERVE, TensorBoardManager  # noqa: E402
from jupyter_disttrain.storage.store import JobRecord, JobStore  # noqa: E402

SETTINGS = (0, 3600, 86400, -1)


def fill(store: JobStore, jobs: int, points: int, age: float) -> None:
    from torch.utils.tensorboard import SummaryWriter

    start = time.time() - age - points
    for _ in range(jobs):
        record = JobRecord(id=store.new_job_id("tb"), spec=JobSpec(name="tb"))
        store.create(record, "print(1)\n")
        run = store.tensorboard_dir(record.id) / "run"
        for writer_name, tag in (("a", "train/loss"), ("b", "eval/acc")):
            writer = SummaryWriter(str(run), filename_suffix=f".{writer_name}")
            for step in range(points):
                writer.add_scalar(tag, 1.0 / (step + 1), step, walltime=start + step)
            writer.close()


def cpu_of(tree: psutil.Process) -> float:
    total = 0.0
    for proc in [tree, *tree.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def measure(store: JobStore, inactive: int, seconds: float, work: Path) -> tuple[float, float]:
    """(seconds until loaded, CPU seconds per second afterwards) of one TensorBoard over _all."""
    manager = TensorBoardManager(store, [sys.executable], "/", multifile_inactive_secs=inactive)
    sock = work / f"tb-{inactive}.sock"
    argv = [sys.executable, str(TB_SERVE), *manager.flags(ALL_JOBS, store.root, sock)]
    log = open(work / f"tb-{inactive}.log", "wb")  # noqa: SIM115 -- closed below
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    tree = psutil.Process(proc.pid)
    try:
        t0 = time.monotonic()
        # Loaded: the CPU use falls to the reload loop's level (under 30 % of a core for 3 s).
        last, quiet_since = cpu_of(tree), None
        while True:
            time.sleep(1.0)
            now = cpu_of(tree)
            busy, last = now - last, now
            quiet_since = (quiet_since or time.monotonic()) if busy < 0.3 else None
            if (quiet_since and time.monotonic() - quiet_since >= 3) or time.monotonic() - t0 > 300:
                break
        loaded = time.monotonic() - t0
        before, t = cpu_of(tree), time.monotonic()
        time.sleep(seconds)
        return loaded, (cpu_of(tree) - before) / (time.monotonic() - t)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--points", type=int, default=500)
    parser.add_argument("--age", type=float, default=7200.0, help="seconds since the jobs last wrote")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3, help="settings interleaved, median of the rounds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tb-") as tmp:
        work = Path(tmp)
        store = JobStore(work / "jobs")
        fill(store, args.jobs, args.points, args.age)
        files = len(list(store.root.glob("*/tensorboard/run/events.*")))
        print(f"{args.jobs} finished jobs, {files} event files, last written {args.age:.0f} s ago")
        runs: dict[int, list[float]] = {s: [] for s in SETTINGS}
        for _ in range(args.rounds):  # interleaved: a noisy minute hits every setting alike
            for inactive in SETTINGS:
                loaded, cpu = measure(store, inactive, args.seconds, work)
                runs[inactive].append(cpu)
                print(
                    f"--reload_multifile_inactive_secs {inactive:>6}: loaded in {loaded:.0f} s, "
                    f"then {cpu * 100:.1f} % of a core"
                )
    results = {s: statistics.median(v) for s, v in runs.items()}
    for inactive, cpu in results.items():
        print(f"median over {args.rounds} rounds, {inactive:>6}: {cpu * 100:.1f} % of a core")
    base = max(results[0], 1e-3)
    for inactive in SETTINGS[1:]:
        print(f"CPU ratio {inactive} / off: {results[inactive] / base:.2f}")


if __name__ == "__main__":
    main()
