"""Cluster iteration: a cold re-run against a warm one, on this machine's own Slurm (the Slurm half
of issue 36's benchmark; the Kubernetes half comes with the pools).

Two cases, each the same 2-rank DDP script (``bench_launch.py``'s body) submitted through the
Python API, alternately cold and warm:

- ``allocation``: inside a one-node allocation (``salloc --no-shell``: the kernel-inside-salloc
  path), ``--cold`` (one new ``srun`` step with torchrun afresh) against warm (forked from the
  allocation's warm step, which a first, unmeasured job starts); ``--nodes 2``: a two-node
  allocation, one rank per node (the same 2 ranks in all), each node's agent forked from its own
  warm step and meeting the other in the c10d rendezvous;
- ``batch``: outside any allocation, a new batch job each time (``sbatch``, the queue, torchrun
  afresh) against a re-run with ``--keep-warm`` (in the batch job kept by a first, unmeasured
  job: no sbatch, forked from its warm step).

For each run: the seconds from the submit call to rank 0's first optimizer step (the time it
printed, read from its log), whether its ranks ran in a step that did not exist before (each rank
prints ``SLURM_JOB_ID.SLURM_STEP_ID``), and the ``sbatch`` calls it made. Pairs alternate which goes first;
the medians, their ratio (target: warm <= 0.1x cold), the new steps of ranks and the sbatch calls
per re-run are the last lines of each case.

    sudo python bench/bench_cluster.py [--pairs 5] [--case allocation|batch|both] [--nodes 1]

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
from jupyter_disttrain.backends.slurm.client import SlurmClient
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore
from tests.slurm.cluster import SlurmCluster, missing

SCRIPT = (
    "import os, torch, torch.distributed as dist, torch.nn as nn\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
    "STEPS = 60\n"
    "print('STEP_ID', os.environ['RANK'], os.environ['SLURM_JOB_ID'] + '.' + os.environ['SLURM_STEP_ID'],"
    " flush=True)\n" + BODY.format()
)
_STEP_ID = re.compile(r"STEP_ID (\d+) (\S+)")


SUBMITTED: list[list[str]] = []  # every sbatch command line, counted through the client


def _counting() -> None:
    real = SlurmClient.submit

    def submit(self: SlurmClient, argv: list[str]) -> str:
        SUBMITTED.append(argv)
        return real(self, argv)

    SlurmClient.submit = submit  # type: ignore[method-assign]


def one_run(
    store: JobStore, options: dict[str, object], seen: set[str], nodes: int = 1
) -> tuple[float, int, int]:
    """Seconds from the submit to rank 0's first optimizer step, how many steps its ranks ran in
    that no earlier run had (``seen``, updated), and its sbatch calls."""
    start, submitted = time.time(), len(SUBMITTED)
    gpus = max(1, 2 // nodes)
    job = api.submit(
        SCRIPT, store=store, backend="slurm", gpus=gpus, nodes=nodes, name="bench", options=options
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
    return step_at - start, new, len(SUBMITTED) - submitted


def measure(
    store: JobStore, case: str, pairs: int, cold: dict[str, object], warm: dict[str, object], nodes: int = 1
) -> None:
    """The pairs of one case, after a first warm job (it starts the warm step: not a re-run)."""
    seen: set[str] = set()
    first, _, _ = one_run(store, warm, seen, nodes)
    print(f"{case}: first warm job (starts the warm step): {first:.2f} s", flush=True)
    options = {"cold": cold, "warm": warm}
    times: dict[str, list[float]] = {"cold": [], "warm": []}
    new_steps: dict[str, list[int]] = {"cold": [], "warm": []}
    sbatch: dict[str, list[int]] = {"cold": [], "warm": []}
    for pair in range(pairs):
        for kind in ("cold", "warm") if pair % 2 == 0 else ("warm", "cold"):
            took, new, submitted = one_run(store, options[kind], seen, nodes)
            times[kind].append(took)
            new_steps[kind].append(new)
            sbatch[kind].append(submitted)
        print(f"{case} pair {pair + 1}: " + ", ".join(f"{k} {times[k][-1]:.2f} s" for k in times), flush=True)
    cold_s, warm_s = statistics.median(times["cold"]), statistics.median(times["warm"])
    print(
        f"{case}: submit to rank 0's first optimizer step, median of {pairs}: "
        f"cold {cold_s:.2f} s, warm {warm_s:.2f} s"
    )
    print(f"{case}: warm re-run / cold: {warm_s / cold_s:.3f}x (target <= 0.1x)")
    for kind in ("cold", "warm"):
        print(
            f"{case}: per {kind} re-run: {statistics.mean(new_steps[kind]):.1f} new Slurm steps of ranks, "
            f"{statistics.mean(sbatch[kind]):.1f} sbatch calls"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--case", choices=("allocation", "batch", "both"), default="both")
    parser.add_argument("--nodes", type=int, default=1, choices=(1, 2), help="of the allocation case")
    args = parser.parse_args()
    if why := missing():
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="bc-run-")  # a short path for sockets
    store = JobStore(work / "jobs")
    _counting()
    with SlurmCluster(batch_sched_delay=None) as cluster:
        os.environ.update(cluster.env)
        if args.case in ("allocation", "both"):
            out = cluster.run("salloc", "--no-shell", f"--nodes={args.nodes}", "--job-name=bench").stderr
            allocation = re.search(r"Granted job allocation (\d+)", out).group(1)  # type: ignore[union-attr]
            os.environ.update({"SLURM_JOB_ID": allocation, "SLURM_JOB_NUM_NODES": str(args.nodes)})
            measure(store, "allocation", args.pairs, {"cold": True}, {"keep_warm": "1h"}, args.nodes)
            cluster.run("scancel", allocation, check=False)
            for key in ("SLURM_JOB_ID", "SLURM_JOB_NUM_NODES"):
                os.environ.pop(key)
        if args.case in ("batch", "both"):
            measure(store, "batch", args.pairs, {}, {"keep_warm": "1h"})
            cluster.run("scancel", "--me", check=False)  # the kept batch job
    return 0


if __name__ == "__main__":
    sys.exit(main())
