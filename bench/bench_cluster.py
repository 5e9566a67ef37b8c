"""Cluster iteration: a cold re-run against a warm one, on this machine's own Slurm (the Slurm half
of issue 36's benchmark; the Kubernetes half comes with the pools).

Inside a one-node allocation (``salloc --no-shell``: the kernel-inside-salloc path) the same
2-rank DDP script (``bench_launch.py``'s body) is submitted through the Python API, alternately
``--cold`` (one new ``srun`` step with torchrun afresh) and warm (forked from the allocation's
warm step, which a first, unmeasured job starts). For each run: the seconds from the submit call
to rank 0's first optimizer step (the time it printed, read from its log), and whether its ranks
ran in a step that did not exist before (each rank prints ``SLURM_STEP_ID``). Pairs alternate
which goes first; the medians, their ratio (target: warm <= 0.1x cold) and the new steps per
re-run (target: 0 warm) are the last lines. ``--nodes 2``: a two-node allocation, one rank per
node (the same 2 ranks in all), each node's agent forked from its own warm step and meeting the
other in the c10d rendezvous.

    sudo python bench/bench_cluster.py [--pairs 5] [--nodes 1]

Needs root and Debian's Slurm (``tests/slurm/install.sh``).
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_launch import _MARK, BODY

from jupyter_disttrain import api
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore
from tests.slurm.cluster import SlurmCluster, missing

SCRIPT = (
    "import os, torch, torch.distributed as dist, torch.nn as nn\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
    "STEPS = 60\n"
    "print('STEP_ID', os.environ['RANK'], os.environ['SLURM_STEP_ID'], flush=True)\n" + BODY.format()
)
_STEP_ID = re.compile(r"STEP_ID (\d+) (\S+)")


def one_run(store: JobStore, cold: bool, seen: set[str], nodes: int = 1) -> tuple[float, int]:
    """Seconds from the submit to rank 0's first optimizer step, and how many steps its ranks ran
    in that no earlier run had (``seen``, updated)."""
    start = time.time()
    options = {"cold": True} if cold else {"keep_warm": "1h"}
    job = api.submit(
        SCRIPT,
        store=store,
        backend="slurm",
        gpus=max(1, 2 // nodes),
        nodes=nodes,
        name="cold" if cold else "warm",
        options=options,
    )
    status = job.wait(timeout=600)
    if status.phase is not JobPhase.SUCCEEDED:
        raise RuntimeError(f"job {job.id} {status.phase.value}: {status.message}")
    step_at, steps = None, set()
    for line in job.logs():
        if (m := _MARK.search(line.text)) and m.group(1) == "step" and m.group(2) == "0":
            step_at = float(m.group(3))
        if m := _STEP_ID.search(line.text):
            steps.add(m.group(2))
    if step_at is None:
        raise RuntimeError(f"job {job.id}: no first step in rank 0's log")
    new = len(steps - seen)
    seen |= steps
    return step_at - start, new


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=1, choices=(1, 2))
    args = parser.parse_args()
    if why := missing():
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="bc-run-")  # a short path for sockets
    store = JobStore(work / "jobs")
    times: dict[str, list[float]] = {"cold": [], "warm": []}
    new_steps: dict[str, list[int]] = {"cold": [], "warm": []}
    with SlurmCluster(batch_sched_delay=None) as cluster:
        os.environ.update(cluster.env)
        out = cluster.run("salloc", "--no-shell", f"--nodes={args.nodes}", "--job-name=bench").stderr
        allocation = re.search(r"Granted job allocation (\d+)", out).group(1)  # type: ignore[union-attr]
        os.environ.update({"SLURM_JOB_ID": allocation, "SLURM_JOB_NUM_NODES": str(args.nodes)})
        seen: set[str] = set()
        first, _ = one_run(
            store, cold=False, seen=seen, nodes=args.nodes
        )  # starts the warm step: not a re-run
        print(f"first warm job (starts the warm step): {first:.2f} s", flush=True)
        for pair in range(args.pairs):
            for kind in ("cold", "warm") if pair % 2 == 0 else ("warm", "cold"):
                took, new = one_run(store, cold=kind == "cold", seen=seen, nodes=args.nodes)
                times[kind].append(took)
                new_steps[kind].append(new)
            print(f"pair {pair + 1}: " + ", ".join(f"{k} {times[k][-1]:.2f} s" for k in times), flush=True)
        cluster.run("scancel", allocation, check=False)
    cold, warm = statistics.median(times["cold"]), statistics.median(times["warm"])
    print(
        f"submit to rank 0's first optimizer step, median of {args.pairs}: "
        f"cold {cold:.2f} s, warm {warm:.2f} s"
    )
    print(f"warm re-run / cold: {warm / cold:.3f}x (target <= 0.1x)")
    for kind in ("cold", "warm"):
        print(f"new Slurm steps per {kind} re-run: {statistics.mean(new_steps[kind]):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
