"""The resource sampler's own cost, and what it costs training.

(a) sampler CPU: 8 "ranks" (each a sleeping Python process with one child, as a rank with a
DataLoader worker) sampled by ``runtime.sampler.Monitor`` as the launcher does; the CPU time of
``--ticks`` ticks over the interval they span gives the share of one core it takes at the
default 2 s interval (target < 1 %).
(b) throughput: a real 2-rank DDP job (gloo, CPU) with the default monitoring and the same job
with ``--monitor-interval 0``, run side by side (at the same time, so a shared VM's changing
load hits both alike; back-to-back runs varied 2.5x here), steps per second measured inside
rank 0 after warm-up; the median of the pairs' ratios (target >= 0.99). The load average is
printed so the figures can be judged.

    python bench/bench_monitor.py [--pairs 3] [--steps 1500] [--ticks 50]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_disttrain.api import submit  # noqa: E402
from jupyter_disttrain.backends.agents.request import DEFAULT_MONITOR_INTERVAL  # noqa: E402
from jupyter_disttrain.runtime.sampler import Monitor  # noqa: E402
from jupyter_disttrain.storage.store import JobStore  # noqa: E402

RANK = """
import subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
time.sleep(3600)
"""

TRAIN = """
import os, time
import torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 256)
STEPS = int(os.environ["BENCH_STEPS"])
for step in range(STEPS):
    if step == 100:
        t0 = time.perf_counter()
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
if dist.get_rank() == 0:
    print(f"STEPS_PER_SEC {(STEPS - 100) / (time.perf_counter() - t0):.3f}", flush=True)
dist.destroy_process_group()
"""
_SPS = re.compile(r"STEPS_PER_SEC (\d+\.\d+)")


def sampler_cost(ranks: int, ticks: int) -> float:
    """Percent of one core the sampler takes at the default interval."""
    procs = [subprocess.Popen([sys.executable, "-c", RANK], start_new_session=True) for _ in range(ranks)]
    try:
        time.sleep(2.0)  # the children start
        with tempfile.TemporaryDirectory() as tmp:
            pids = {f"rank-{i}": p.pid for i, p in enumerate(procs)}
            monitor = Monitor(tmp, DEFAULT_MONITOR_INTERVAL, lambda: pids, lambda r: None, print)
            monitor.tick()  # the first tick makes the samplers (their start is not the steady cost)
            cpu = time.process_time()
            for _ in range(ticks):
                monitor.tick()
            per_tick = (time.process_time() - cpu) / ticks
            lines = sum(1 for f in Path(tmp).glob("rank-*.jsonl") for _ in f.open())
            assert lines == ranks * ticks, lines
        return 100 * per_tick / DEFAULT_MONITOR_INTERVAL
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)  # the rank and its worker


def side_by_side(root: Path, steps: int) -> dict[bool, float]:
    """Steps per second of the job with monitoring (True) and without (False), run together."""
    jobs = {
        monitor: submit(
            TRAIN,
            store=JobStore(root),
            gpus=2,
            accelerator="cpu",
            name="bench-monitor",
            env={"BENCH_STEPS": str(steps)},
            options={} if monitor else {"monitor_interval": 0},
        )
        for monitor in (True, False)
    }
    out = {}
    for monitor, job in jobs.items():
        status = job.wait(timeout=900)
        match = _SPS.search((job.dir / "logs" / "rank-0.log").read_text())
        if status.phase.value != "Succeeded" or match is None:
            raise SystemExit(f"bench job {job.id} failed: {status.message}")
        out[monitor] = float(match.group(1))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--ticks", type=int, default=50)
    parser.add_argument("--ranks", type=int, default=8)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    cost = sampler_cost(args.ranks, args.ticks)
    print(
        f"sampler CPU, {args.ranks} ranks (+1 child each), every {DEFAULT_MONITOR_INTERVAL:.0f} s: "
        f"{cost:.3f} % of one core (target < 1 %)"
    )
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            got = side_by_side(Path(tmp), args.steps)
            ratios.append(got[True] / got[False])
            print(f"pair {i + 1}: with {got[True]:.1f} steps/s, without {got[False]:.1f} steps/s")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    print(f"sampler cost ratio (share of one core): {cost / 100:.4f}  (target < 0.01)")
    print(
        f"throughput ratio with/without monitoring (median of {args.pairs}): "
        f"{statistics.median(ratios):.3f}  (target >= 0.99)"
    )


if __name__ == "__main__":
    main()
