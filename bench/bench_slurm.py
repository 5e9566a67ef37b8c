"""Submit to first line of user code: a Slurm job on this machine's own Slurm against the local backend.

The same 2-rank script is submitted through the Python API, alternately to the local backend
and to a private two-node Slurm cluster (``tests/slurm/cluster.py``, with Slurm's default
scheduling delays: ``batch_sched_delay`` 3 s) as a batch job (sbatch), and, with ``--steps``, as
job steps inside an allocation (``salloc --no-shell``: the kernel-inside-salloc path, no
queue). The time from the submit call to rank 0's first line (the time it printed, as read
from its log) is measured for each; the median of each pair's ratio is the result.

    sudo python bench/bench_slurm.py [--runs 6] [--steps]

Needs root and Debian's Slurm (``tests/slurm/install.sh``). The last lines are the ratios.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_disttrain import api
from jupyter_disttrain.storage.store import JobStore
from tests.slurm.cluster import SlurmCluster, missing

SCRIPT = """
import os, time
print(f"FIRST_LINE {os.environ['RANK']} {time.time():.6f}", flush=True)
"""
_FIRST = re.compile(r"FIRST_LINE 0 (\d+\.\d+)")


def first_line(store: JobStore, backend: str, timeout: float = 300) -> float:
    """Seconds from submitting to rank 0's first line, by the time rank 0 printed."""
    start = time.time()
    job = api.submit(SCRIPT, store=store, backend=backend, gpus=2, name=backend)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in job.logs(replica="rank-0"):
            if m := _FIRST.search(line.text):
                job.wait(timeout=120)
                return float(m.group(1)) - start
        time.sleep(0.05)
    raise RuntimeError(f"no first line from {backend} job {job.id} in {timeout:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--steps", action="store_true", help="also job steps inside an allocation")
    args = parser.parse_args()
    if why := missing():
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-slurm-"))
    store = JobStore(work / "jobs")
    modes = ["batch", *(["steps"] if args.steps else [])]
    times: dict[str, list[float]] = {"local": [], **{m: [] for m in modes}}
    with SlurmCluster(batch_sched_delay=None) as cluster:
        os.environ.update(cluster.env)
        allocation = None
        if args.steps:
            out = cluster.run("salloc", "--no-shell", "--nodes=1", "--job-name=bench").stderr
            allocation = re.search(r"Granted job allocation (\d+)", out).group(1)  # type: ignore[union-attr]
        for run in range(args.runs):
            order = ["local", *modes] if run % 2 == 0 else [*modes, "local"]
            for mode in order:
                if mode == "steps":
                    os.environ.update({"SLURM_JOB_ID": str(allocation), "SLURM_JOB_NUM_NODES": "1"})
                times[mode].append(first_line(store, "local" if mode == "local" else "slurm"))
                for key in ("SLURM_JOB_ID", "SLURM_JOB_NUM_NODES"):
                    os.environ.pop(key, None)
            print(f"run {run + 1}: " + ", ".join(f"{m} {times[m][-1]:.2f} s" for m in times), flush=True)
    for mode in times:
        print(f"{mode}: median {statistics.median(times[mode]):.2f} s (min {min(times[mode]):.2f})")
    for mode in modes:
        ratios = [s / loc for s, loc in zip(times[mode], times["local"], strict=True)]
        print(f"slurm {mode} / local, submit to first line: median ratio {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
