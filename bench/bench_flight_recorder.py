"""What the collective diagnosis costs: the Flight Recorder's overhead on training, and the time
from "Diagnose" to the verdict.

(a) throughput: a real 2-rank job (gloo, CPU) as shipped, the Flight Recorder on (torch's
default, 2,000 entries), each rank's debug socket served and its launcher's guard reading the
ranks' records every look, against the same job with ``TORCH_FR_BUFFER_SIZE=0`` and ``--guard
off``; run side by side (a shared VM's changing load hits both alike), steps per second measured
inside rank 0 after warm-up, the median of the pairs' ratios (target >= 0.99). Two workloads: a
DDP step (a small MLP: its gradients are one all_reduce bucket) and the worst case for a
recorder, a loop of 1-element all_reduces (nothing but collectives).
(b) diagnosis time: a 2-rank job whose rank 1 sleeps before all_reduce #5; ``--rounds``
diagnoses (``JobDiagnoses.diagnose``: every rank's socket read, torch's analyzer, the verdict
mapped to the cells, the incident written), median and max (target <= 5 s).

    python bench/bench_flight_recorder.py [--pairs 4] [--steps 1500] [--rounds 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_disttrain.api import Job, submit  # noqa: E402
from jupyter_disttrain.jobs.manager import manager_for  # noqa: E402
from jupyter_disttrain.storage.store import JobStore  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from bench_monitor import _SPS  # noqa: E402 (the same reading of rank 0's steps per second)
from bench_monitor import TRAIN as DDP  # noqa: E402 (the same DDP step as the monitoring bench)

# A loop of nothing but 1-element all_reduces: the worst case for a recorder of collectives.
TINY = """
import os, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t, n = torch.ones(1), 10 * int(os.environ["BENCH_STEPS"])
for _ in range(1000):
    dist.all_reduce(t)
t0 = time.perf_counter()
for _ in range(n):
    dist.all_reduce(t)
if dist.get_rank() == 0:
    print(f"STEPS_PER_SEC {n / (time.perf_counter() - t0):.3f}", flush=True)
"""
LATE = """
import time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4)
for i in range(10):
    if dist.get_rank() == 1 and i == 4:
        time.sleep(3600)
    dist.all_reduce(t)
    print("step", i, flush=True)
"""


def side_by_side(root: Path, script: str, steps: int, first: bool) -> dict[bool, float]:
    """Steps per second with the Flight Recorder (True) and without (False), run together (both
    cold: a warm zygote's first fork would differ from a cold start; ``first`` is submitted
    first, the pairs alternate)."""

    def start(on: bool) -> Job:
        env = {"BENCH_STEPS": str(steps)} | ({} if on else {"TORCH_FR_BUFFER_SIZE": "0"})
        options = {"cold": True} | ({} if on else {"guard": "off"})
        return submit(
            script, store=JobStore(root), gpus=2, accelerator="cpu", name="bench-fr", env=env, options=options
        )

    jobs = {on: start(on) for on in (first, not first)}
    return {on: _steps_per_second(job) for on, job in jobs.items()}


def _steps_per_second(job: Job) -> float:
    """What rank 0 said of its pace, once the job succeeded."""
    ended = job.wait(timeout=900)
    said = _SPS.search((job.dir / "logs" / "rank-0.log").read_text())
    if ended.phase.value == "Succeeded" and said is not None:
        return float(said.group(1))
    raise SystemExit(f"bench job {job.id} failed: {ended.message}")


def diagnosis_times(root: Path, rounds: int) -> list[float]:
    store = JobStore(root)
    job = submit(LATE, store=store, gpus=2, accelerator="cpu", name="bench-late")
    try:
        log = job.dir / "logs" / "rank-0.log"
        end = time.monotonic() + 300
        while not (log.exists() and "step 3" in log.read_text()):
            if time.monotonic() > end or job.status().is_terminal:
                raise SystemExit(f"the hung job {job.id} did not reach step 3: {job.status().message}")
            time.sleep(0.2)
        time.sleep(1.0)
        times, verdict = [], ""
        for _ in range(rounds):
            start = time.perf_counter()
            verdict = manager_for(store).diagnoses.diagnose(job.id).verdict
            times.append(time.perf_counter() - start)
        print(f"verdict: {verdict}")
        return times
    finally:
        job.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        times = diagnosis_times(Path(tmp), args.rounds)
        results = {}
        for name, script in (("DDP step", DDP), ("1-element all_reduce", TINY)):
            ratios = []
            for i in range(args.pairs):
                got = side_by_side(Path(tmp), script, args.steps, first=i % 2 == 0)
                ratios.append(got[True] / got[False])
                print(f"{name}, pair {i + 1}: with {got[True]:.1f} steps/s, without {got[False]:.1f} steps/s")
            results[name] = statistics.median(ratios)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    print(
        f"diagnosis time, 2 ranks, {args.rounds} rounds: median {statistics.median(times):.3f} s, "
        f"max {max(times):.3f} s  (target <= 5 s; ratio to it {max(times) / 5:.3f})"
    )
    for name, ratio in results.items():
        what = f"throughput ratio with/without the Flight Recorder, {name} (median of {args.pairs})"
        print(f"{what}: {ratio:.3f}  (target >= 0.99)")


if __name__ == "__main__":
    main()
