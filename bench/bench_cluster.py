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

``--case kubernetes``: the same script on the toy cluster (``tests/k8s/``: the fake API server,
its Job controller, a kubelet that runs pods as local processes; no Slurm, no root), one pod of
2 ranks (``--nodes 2``: two pods of one rank, a two-node pool whose agents meet in the rendezvous
node 0's pod hosts), alternately ``--cold`` (a new Job: its Pod is scheduled, started, imports torch) and a
warm re-run (forked in the pool pod(s) a first, unmeasured ``--cold --keep-warm`` job left, through
``pods/exec``), with the Pod objects each run created (target: 0 warm). No image pull or
scheduling queue is modelled: a real cluster's cold start is slower, the warm one the same.

    python bench/bench_cluster.py --case kubernetes [--pairs 5] [--nodes 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _scratch import scratch
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


Run = Callable[[dict[str, object]], tuple[float, dict[str, int]]]


def one_run(
    store: JobStore, options: dict[str, object], seen: set[str], nodes: int = 1
) -> tuple[float, dict[str, int]]:
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
    lines = [line.text for line in job.logs()]
    steps = {m.group(2) for text in lines if (m := _STEP_ID.search(text))}
    new = len(steps - seen)
    seen |= steps
    counts = {"new Slurm steps of ranks": new, "sbatch calls": len(SUBMITTED) - submitted}
    return first_step(lines, job.id) - start, counts


def first_step(lines: list[str], job: str) -> float:
    """When rank 0 printed its first optimizer step's mark."""
    for text in lines:
        if (m := _MARK.search(text)) and m.group(1) == "step" and m.group(2) == "0":
            return float(m.group(3))
    raise RuntimeError(f"job {job}: no first step in rank 0's log, which ends {lines[-5:]}")


def measure(
    case: str,
    pairs: int,
    run: Run,
    cold: dict[str, object],
    warm: dict[str, object],
    first: dict[str, object],
) -> None:
    """The pairs of one case, after a ``first`` job (it leaves the warm capacity: not a re-run)."""
    took, _ = run(first)
    print(f"{case}: first job (leaves the warm capacity): {took:.2f} s", flush=True)
    options = {"cold": cold, "warm": warm}
    times: dict[str, list[float]] = {"cold": [], "warm": []}
    counts: dict[str, list[dict[str, int]]] = {"cold": [], "warm": []}
    for pair in range(pairs):
        for kind in ("cold", "warm") if pair % 2 == 0 else ("warm", "cold"):
            took, counted = run(options[kind])
            times[kind].append(took)
            counts[kind].append(counted)
        print(f"{case} pair {pair + 1}: " + ", ".join(f"{k} {times[k][-1]:.2f} s" for k in times), flush=True)
    cold_s, warm_s = statistics.median(times["cold"]), statistics.median(times["warm"])
    print(
        f"{case}: submit to rank 0's first optimizer step, median of {pairs}: "
        f"cold {cold_s:.2f} s, warm {warm_s:.2f} s"
    )
    print(f"{case}: warm re-run / cold: {warm_s / cold_s:.3f}x (target <= 0.1x)")
    for kind in ("cold", "warm"):
        means = {name: statistics.mean(c[name] for c in counts[kind]) for name in counts[kind][0]}
        print(f"{case}: per {kind} re-run: " + ", ".join(f"{v:.1f} {name}" for name, v in means.items()))


def kubernetes(pairs: int, nodes: int) -> None:
    """The Kubernetes case on the toy cluster (the tests' own); ``nodes`` pods of 2 // nodes ranks."""
    from jupyter_disttrain.backends.kubernetes import KubernetesBackend
    from jupyter_disttrain.backends.kubernetes.informer import stop_all
    from jupyter_disttrain.model.specs import JobSpec, Volume
    from tests.k8s.conftest import wait_for
    from tests.k8s.toycluster import ToyCluster

    work = scratch("bench-k8s-")
    (work / "project").mkdir()
    where = {"volumes": [Volume("workspace", str(work))], "working_dir": str(work / "project")}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the toy cluster stops its pods
    with ToyCluster() as toy:
        (work / "kubeconfig").write_text(yaml.safe_dump(toy.server.kubeconfig()))
        os.environ["KUBECONFIG"] = str(work / "kubeconfig")
        backend = KubernetesBackend(JobStore(work / ".disttrain" / "jobs"))

        def pods() -> int:
            with toy.cluster.cond:
                return sum(
                    1 for _, key, kind, _ in toy.cluster.history if key == "/v1/pods" and kind == "ADDED"
                )

        def run(options: dict[str, object]) -> tuple[float, dict[str, int]]:
            shape = {"nodes": nodes, "nproc_per_node": 2 // nodes}
            spec = JobSpec(name="bench", backend="kubernetes", image="pytorch:local", **shape, **where)
            before, start = pods(), time.time()
            job = backend.submit(
                dataclasses.replace(spec, options={"namespace": "team-a", **options}), K8S_SCRIPT
            )
            status = wait_for(backend, job, lambda s: s.is_terminal, timeout=600)
            lines = [ln.text for ln in backend.logs(job)]
            if status.phase is not JobPhase.SUCCEEDED:
                raise RuntimeError(f"job {job} {status.phase.value}: {status.message}: {lines[-10:]}")
            return first_step(lines, job) - start, {"new Pod objects": pods() - before}

        keep = {"keep_warm": "10m"}
        case = "kubernetes" if nodes == 1 else f"kubernetes, {nodes} nodes"
        measure(case, pairs, run, {"cold": True}, keep, {"cold": True, **keep})
        stop_all()


K8S_SCRIPT = (
    "import os, torch, torch.distributed as dist, torch.nn as nn\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
    "STEPS = 60\n" + BODY.format()
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--case", choices=("allocation", "batch", "both", "kubernetes"), default="both")
    parser.add_argument("--nodes", type=int, default=1, choices=(1, 2), help="allocation, kubernetes")
    args = parser.parse_args()
    if args.case == "kubernetes":
        kubernetes(args.pairs, args.nodes)
        return 0
    if why := missing():
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    work = scratch("bench-cluster-")
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="bc-run-")  # a short path for sockets
    store = JobStore(work / "jobs")
    _counting()
    with SlurmCluster(batch_sched_delay=None) as cluster:
        os.environ.update(cluster.env)
        if args.case in ("allocation", "both"):
            out = cluster.run("salloc", "--no-shell", f"--nodes={args.nodes}", "--job-name=bench").stderr
            allocation = re.search(r"Granted job allocation (\d+)", out).group(1)  # type: ignore[union-attr]
            os.environ.update({"SLURM_JOB_ID": allocation, "SLURM_JOB_NUM_NODES": str(args.nodes)})
            seen: set[str] = set()
            run: Run = lambda options: one_run(store, options, seen, args.nodes)  # noqa: E731
            measure("allocation", args.pairs, run, {"cold": True}, {"keep_warm": "1h"}, {"keep_warm": "1h"})
            cluster.run("scancel", allocation, check=False)
            for key in ("SLURM_JOB_ID", "SLURM_JOB_NUM_NODES"):
                os.environ.pop(key)
        if args.case in ("batch", "both"):
            seen = set()
            run = lambda options: one_run(store, options, seen)  # noqa: E731
            measure("batch", args.pairs, run, {}, {"keep_warm": "1h"}, {"keep_warm": "1h"})
            cluster.run("scancel", "--me", check=False)  # the kept batch job
    return 0


if __name__ == "__main__":
    sys.exit(main())
