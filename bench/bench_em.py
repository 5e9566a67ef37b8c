"""What ``run.log`` costs a training loop.

A CPU training step (a small MLP: forward, backward, SGD; one torch thread, as each rank of a
several-rank job has) is timed in a loop without ``em`` and in the same loop calling
``run.log("train", {"loss": ...}, step=i)`` once per step, about 1,000 logs/s at ~1 ms a step.
The two loops alternate over several rounds and their wall-clock medians are compared; as wall
time on a shared machine is noisy, the overhead ratio (target < 1 %) is the CPU time a point
costs in this process (``run.log`` in the training thread plus the background JSONL write, each
timed with ``thread_time``) over the CPU time of a step. Also measured: the TensorBoard follower
process's CPU per point, and a burst of 100,000 points as fast as they come (memory stays
bounded: the buffer's high-water mark and the RSS growth).

    python bench/bench_em.py [--steps 3000] [--rounds 7]

Writes under a temporary directory (outside a job: ``./.disttrain/``), removed at the end.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from jupyter_disttrain import em
from jupyter_disttrain.em import sink
from jupyter_disttrain.em.files import append_text


def make_step() -> Callable[[], float]:
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randn(64, 1)

    def step() -> float:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return step


def timed_loop(step: Callable[[], float], steps: int, run: em.Run | None) -> float:
    """Seconds per step."""
    start = time.perf_counter()
    for i in range(steps):
        loss = step()
        if run is not None:
            run.log("train", {"loss": loss}, step=i)
    return (time.perf_counter() - start) / steps


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu_per_point(run: em.Run, points: int, path: Path) -> tuple[float, float]:
    """CPU seconds per point of ``run.log`` (the training thread) and of the background write
    (formatting and appending the lines), each timed with thread_time, so other load on the
    machine does not count."""
    start = time.thread_time()
    for i in range(points):
        run.log("train", {"loss": 0.5}, step=i)
    logged = time.thread_time()
    batch: list[sink.Point] = [("train", "loss", 0.5 + i, i, 0, time.time(), False) for i in range(points)]
    before_write = time.thread_time()
    append_text(path, "".join(sink.line(p) for p in batch))
    written = time.thread_time()
    return (logged - start) / points, (written - before_write) / points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.chdir(tempfile.mkdtemp(prefix="bench-em-"))
    step = make_step()
    timed_loop(step, 300, None)  # warm up
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")

    run = em.create_run("bench", hparams={"lr": 0.01})
    bare: list[float] = []
    logged: list[float] = []
    for r in range(args.rounds):
        # Alternate which loop goes first so drift (thermal, other load) hits both alike.
        order = [None, run] if r % 2 == 0 else [run, None]
        for which in order:
            (bare if which is None else logged).append(timed_loop(step, args.steps, which))
    without, with_em = statistics.median(bare), statistics.median(logged)
    step_cpu = statistics.median(timed_cpu(step) for _ in range(5))
    log_cpu, write_cpu = cpu_per_point(run, 100_000, Path("scratch.jsonl"))
    high_water, rss_before = 0, rss_mb()
    burst = 100_000
    for i in range(burst):
        run.log("train", {"burst": 0.5}, step=i)
        if i % 1000 == 0:
            high_water = max(high_water, len(run._sink._pending))
    follower_before = children_cpu()
    run.finish()  # waits for the TensorBoard follower, whose CPU then shows in RUSAGE_CHILDREN
    follower_cpu = (children_cpu() - follower_before) / (args.rounds * args.steps + 200_000)

    print(f"step (CPU, 1 torch thread): {step_cpu * 1e6:7.1f} us")
    print(f"run.log in the training thread: {log_cpu * 1e6:5.2f} us CPU a point")
    print(f"background JSONL write:         {write_cpu * 1e6:5.2f} us CPU a point (shares the GIL)")
    print(
        f"TensorBoard follower process:   {follower_cpu * 1e6:5.1f} us CPU a point (another process: no GIL)"
    )
    print(f"burst of {burst:,} points: buffer high-water {high_water:,} (cap {sink.MAX_PENDING:,}),")
    print(f"  max RSS grew {rss_mb() - rss_before:.1f} MB")
    print(f"wall clock, median of {args.rounds} alternating rounds of {args.steps} steps:")
    print(
        f"  without em {without * 1e6:7.1f} us/step; with run.log {with_em * 1e6:7.1f} us/step "
        f"({1 / with_em:,.0f} logs/s): {(with_em - without) / without * 100:+.2f} %"
        f" (load average now {os.getloadavg()[0]:.2f})"
    )
    # At 1,000 logs/s the training process spends 1,000 x (log + write) CPU seconds a second.
    ratio = 1000 * (log_cpu + write_cpu) * 100
    print(f"one log a step, step CPU {step_cpu * 1e6:.0f} us: {(log_cpu + write_cpu) / step_cpu * 100:.2f} %")
    print(f"OVERHEAD at 1,000 logs/s (CPU of the training process): {ratio:.2f} % (target < 1 %)")


def timed_cpu(step: Callable[[], float], steps: int = 500) -> float:
    start = time.thread_time()
    for _ in range(steps):
        step()
    return (time.thread_time() - start) / steps


if __name__ == "__main__":
    main()
