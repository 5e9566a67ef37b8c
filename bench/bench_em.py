"""What ``run.log`` costs a training loop.

A CPU training step (a small MLP: forward, backward, SGD; one torch thread, as each rank of a
several-rank job has) is timed in a loop without ``em`` and in the same loop calling
``run.log("train", {"loss": ...}, step=i)`` once per step, about 1,000 logs/s at ~1 ms a step.
The two loops alternate over several rounds; the medians give the overhead ratio (target
< 1 %). Also measured: the bare cost of one ``run.log`` call, and a burst of 100,000 points as
fast as they come (memory stays bounded: the buffer's high-water mark and the RSS growth).

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

import torch

from jupyter_disttrain import em
from jupyter_disttrain.em import sink


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.chdir(tempfile.mkdtemp(prefix="bench-em-"))
    step = make_step()
    timed_loop(step, 300, None)  # warm up

    run = em.create_run("bench", hparams={"lr": 0.01})
    bare, logged = [], []
    for r in range(args.rounds):
        # Alternate which loop goes first so drift (thermal, other load) hits both alike.
        order = [None, run] if r % 2 == 0 else [run, None]
        for which in order:
            (bare if which is None else logged).append(timed_loop(step, args.steps, which))
    without, with_em = statistics.median(bare), statistics.median(logged)
    print(f"step without em: {without * 1e6:8.1f} us  ({1 / without:,.0f} steps/s)")
    print(f"step with run.log: {with_em * 1e6:6.1f} us  ({1 / with_em:,.0f} logs/s)")

    calls = 100_000
    high_water, rss_before = 0, rss_mb()
    start = time.perf_counter()
    for i in range(calls):
        run.log("train", {"burst": 0.5}, step=i)
        if i % 1000 == 0:
            high_water = max(high_water, len(run._sink._pending))
    per_call = (time.perf_counter() - start) / calls
    run.finish()
    print(f"run.log alone: {per_call * 1e6:.2f} us a call ({1 / per_call:,.0f} points/s in a tight loop)")
    print(f"burst of {calls:,}: buffer high-water {high_water:,} points (cap {sink.MAX_PENDING:,}), ")
    print(f"  max RSS grew {rss_mb() - rss_before:.1f} MB")
    print(
        f"OVERHEAD at ~{1 / with_em:,.0f} logs/s: {(with_em - without) / without * 100:+.2f} % (target < 1 %)"
    )


if __name__ == "__main__":
    main()
