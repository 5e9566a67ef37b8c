"""Launch times and training throughput: raw torchrun, ``%%distrun`` cold, ``%%distrun`` warm.

For 2 and 4 CPU ranks, side by side in one run, each of:

- ``torchrun``: ``python -m torch.distributed.run --standalone --nproc-per-node=N`` on the very
  script the job packaged, started like a shell would (the plain alternative);
- ``cold``: ``%%distrun --cold`` from a kernel (torchrun afresh, as before warm start);
- ``warm first``: a fresh kernel's first ``%%distrun`` after ``%load_ext`` (the zygote started at
  load, while the user typed: the bench waits until it is ready, as typing would);
- ``warm rerun``: the same cell run again in that kernel, its zygote ready (as after any run);
- ``run all``: a fresh kernel's cells run one after the other without a pause (Run All): the
  ``%%distrun`` cell is sent as soon as the cell with ``%load_ext`` has run, while the zygote
  still imports torch (the job waits for it; its dry run says so).

Times are from the moment the cell is sent (for torchrun: the moment it is started) to rank 0's
first line, to every rank being in the process group, to the first optimizer step (all ranks),
and to the end of the job (the cell's end); then training steps per second. Runs alternate
between the kinds, N rounds; medians are printed, and their ratios to torchrun's (targets: warm
first optimizer step <= 0.15, whole small job <= 0.5, cold <= 1.0, throughput >= 0.98). Last, the
zygote's memory when idle (RSS, and PSS: its share of pages it shares with others).

    python bench/bench_launch.py [--rounds 5] [--steps 1000] [--ranks 2 4]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
from _scratch import scratch
from jupyter_client.manager import KernelManager

from jupyter_disttrain.backends.warm import plan as warm

SETUP = """
%load_ext jupyter_disttrain
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
STEPS = {steps}
"""
BODY = """import os, time
def mark(what):
    print(f"MARK {{what}} {{os.environ['RANK']}} {{time.time():.6f}}", flush=True)
mark("first")
dist.init_process_group("gloo")
mark("group")
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 256)
for step in range(STEPS):
    if step == 50:
        t0 = time.perf_counter()
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    if step == 0:
        mark("step")
if dist.get_rank() == 0:
    print(f"STEPS_PER_SEC {{(STEPS - 50) / (time.perf_counter() - t0):.3f}}", flush=True)
dist.destroy_process_group()
"""
CELL = "%%distrun --gpus {ranks} --name bench --oversubscribe {flags}\n" + BODY
KINDS = ("torchrun", "cold", "warm first", "warm rerun", "run all")
MEASURES = ("first line", "all in group", "first step", "whole job")
_MARK = re.compile(r"MARK (\w+) (\d+) (\d+\.\d{6})")
_SPS = re.compile(r"STEPS_PER_SEC (\d+\.\d+)")


class Kernel:
    def __init__(self, work: Path, env: dict[str, str]) -> None:
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=str(work), env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code: str, timeout: float = 900) -> None:
        msg_id = self.kc.execute(code)
        while True:
            msg = self.kc.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "error":
                raise RuntimeError("\n".join(msg["content"]["traceback"]))
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def measure(text: str, t0: float, end: float, ranks: int) -> dict[str, float]:
    """The times of one run from the marks its ranks printed."""
    marks: dict[str, dict[int, float]] = {}
    for what, rank, at in _MARK.findall(text):
        marks.setdefault(what, {})[int(rank)] = float(at)
    assert all(len(marks[w]) == ranks for w in ("first", "group", "step")), marks
    return {
        "first line": marks["first"][0] - t0,
        "all in group": max(marks["group"].values()) - t0,
        "first step": max(marks["step"].values()) - t0,
        "whole job": end - t0,
        "steps/s": float(_SPS.search(text).group(1)),  # type: ignore[union-attr]
    }


def run_cell(kernel: Kernel, root: Path, ranks: int, steps: int, flags: str) -> dict[str, float]:
    t0 = time.time()
    kernel.run(CELL.format(ranks=ranks, steps=steps, flags=flags))
    end = time.time()
    job = max((p for p in root.iterdir() if (p / "job.json").exists()), key=lambda p: p.stat().st_ctime)
    text = "".join((job / "logs" / f"rank-{r}.log").read_text() for r in range(ranks))
    started = json.loads((job / "status.json").read_text())["events"]
    how = next(e["message"] for e in started if e["reason"] == "Started")
    if ("(warm:" in how) != ("cold" not in flags):
        raise RuntimeError(f"expected {'cold' if flags else 'warm'}, got: {how}")
    return measure(text, t0, end, ranks)


def run_torchrun(script: Path, cwd: Path, ranks: int) -> dict[str, float]:
    t0 = time.time()
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    done = subprocess.run([*argv, str(script)], cwd=cwd, capture_output=True, text=True)
    end = time.time()
    try:  # a rank torch aborts at exit after its work (a known teardown crash) still timed it
        return measure(done.stdout, t0, end, ranks)
    except (AssertionError, AttributeError):
        raise RuntimeError(f"torchrun exited with {done.returncode}: {done.stderr[-2000:]}") from None


def warm_first(
    work: Path, env: dict[str, str], root: Path, ranks: int, steps: int, *, typing: bool = True
) -> dict[str, float]:
    """A fresh kernel: %load_ext starts a zygote (none lives), the user types (``typing``; else
    Run All goes on at once), the first run."""
    directory = warm.zygote_dir()
    warm.stop(directory)
    fp = warm.fingerprint(env)
    while warm.alive(directory, fp):
        time.sleep(0.05)
    kernel = Kernel(work, env)
    try:
        kernel.run(SETUP.format(steps=steps))
        while typing and _state(directory / f"zygote-{fp}.json") != "ready":
            time.sleep(0.1)  # the user still typing
        return run_cell(kernel, root, ranks, steps, "")
    finally:
        kernel.close()
        _until(lambda: not warm.alive(directory, fp), "the zygote to end with its kernel")


def ready_zygote(env: dict[str, str]) -> None:
    """A ready zygote for a re-run: the previous fresh kernel's ended with it (a zygote ends with
    the last process it served), so start one serving this process and wait, as a user who ran a
    cell before would have."""
    fp = warm.start(env)
    _until(lambda: _state(warm.zygote_dir() / f"zygote-{fp}.json") == "ready", "a ready zygote")


def _until(done: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.05)


def _state(path: Path) -> str | None:
    try:
        return str(json.loads(path.read_text()).get("state"))
    except (OSError, ValueError):
        return None  # not written yet


def zygote_memory(env: dict[str, str]) -> tuple[float, float]:
    directory = warm.zygote_dir()
    pid = json.loads((directory / f"zygote-{warm.fingerprint(env)}.json").read_text())["pid"]
    info = psutil.Process(pid).memory_full_info()
    return info.rss / 2**20, info.pss / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    args = ap.parse_args()
    work = scratch("bench-launch-")
    root = work / ".disttrain" / "jobs"
    env = {**os.environ, "DISTTRAIN_JOB_ROOT": str(root), "DISTTRAIN_VIEW": "text"}
    os.environ.update(env)  # the fingerprint this process computes is the kernels'
    results: dict[tuple[int, str], list[dict[str, float]]] = {}
    kernel = Kernel(work, env)
    try:
        kernel.run(SETUP.format(steps=args.steps))
        for ranks in args.ranks:
            # One of each first, not counted: page cache, the zygote's first fork.
            run_cell(kernel, root, ranks, args.steps, "")
            script = max(root.iterdir(), key=lambda p: p.stat().st_ctime) / "train.py"
            run_torchrun(script, work, ranks)
            for i in range(args.rounds):
                order = KINDS if i % 2 == 0 else tuple(reversed(KINDS))
                for kind in order:
                    if kind == "torchrun":
                        result = run_torchrun(script, work, ranks)
                    elif kind == "cold":
                        result = run_cell(kernel, root, ranks, args.steps, "--cold")
                    elif kind in ("warm first", "run all"):
                        result = warm_first(work, env, root, ranks, args.steps, typing=kind == "warm first")
                    else:
                        ready_zygote(env)
                        result = run_cell(kernel, root, ranks, args.steps, "")
                    results.setdefault((ranks, kind), []).append(result)
                    print(
                        f"{ranks} ranks, round {i + 1}, {kind}: "
                        + ", ".join(f"{k} {v:.3f}" for k, v in result.items()),
                        flush=True,
                    )
        ready_zygote(env)
        time.sleep(2)
        rss, pss = zygote_memory(env)
    finally:
        kernel.close()
    med = statistics.median
    print()
    for ranks in args.ranks:
        print(f"== {ranks} ranks, medians of {args.rounds} rounds (seconds; ratio to torchrun)")
        raw = {m: med(r[m] for r in results[(ranks, "torchrun")]) for m in (*MEASURES, "steps/s")}
        print(f"  {'':<12}" + "".join(f"{m:>22}" for m in (*MEASURES, "steps/s")))
        for kind in KINDS:
            cells = []
            for m in (*MEASURES, "steps/s"):
                value = med(r[m] for r in results[(ranks, kind)])
                cells.append(f"{value:9.3f} ({value / raw[m]:5.2f}x)")
            print(f"  {kind:<12}" + "".join(f"{c:>22}" for c in cells))
    print(f"zygote idle memory: RSS {rss:.0f} MiB, PSS {pss:.0f} MiB")


if __name__ == "__main__":
    main()
