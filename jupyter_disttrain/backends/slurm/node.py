"""A Slurm job's node agent: the task of one node's job step, around torchrun's agent.

``python -u -m jupyter_disttrain.backends.slurm.node JOB_DIR NODE NODES INTERVAL -- TORCHRUN...``

It runs on the compute node, in the job step ``srun`` started:

- it records the node in ``slurm/nodes/node-<NODE>.json`` (host, Slurm's node name, job and step
  ids: how the launcher stops the step gracefully and the backend reaches the ranks' stacks);
- node 0 hosts the c10d rendezvous: it picks a port free on its host and writes host and port
  into ``slurm/rdzv-<run>.json``; every node's torchrun gets them in ``PET_RDZV_ENDPOINT``;
- it takes the step's own layout (``SLURM_PROCID``, ``SLURM_NTASKS``...) out of torchrun's
  environment: each rank's layout is torchrun's (``RANK``, ``WORLD_SIZE``), and a library that
  reads Slurm's (Lightning's SLURMEnvironment) must not see one task per node;
- it samples its node's ranks into ``metrics/`` as the local launcher does (``runtime.sampler``):
  the launcher, on the first node, cannot see processes on the others.

Slurm signals every process of the step at once (``scancel --signal``, a time limit), torchrun
included, so the agent forwards nothing: it waits for torchrun and exits with its code.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping

from ...runtime import contract
from ...runtime.atomic import write_json

SLURM_DIR = "slurm"
NODES_DIR = "nodes"
RUN_ENV = "DISTTRAIN_SLURM_RUN"  # one run of the launcher (a requeued job runs it again)
RDZV_ENV = "PET_RDZV_ENDPOINT"
RDZV_TIMEOUT = 300.0
# The step's task layout, which is not the ranks'.
TASK_ENV = (
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_GTIDS",
    "SLURM_TASK_PID",
)


def node_file(job_dir: str, node: int) -> str:
    return os.path.join(job_dir, SLURM_DIR, NODES_DIR, f"node-{node}.json")


def rdzv_file(job_dir: str, run: str) -> str:
    return os.path.join(job_dir, SLURM_DIR, f"rdzv-{run}.json")


def read_json(path: str) -> dict[str, object] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def say(line: str) -> None:
    print(f"disttrain node agent: {line}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def rendezvous(job_dir: str, run: str, node: int, timeout: float = RDZV_TIMEOUT) -> str:
    """``host:port`` of the c10d rendezvous: node 0 hosts it, the others wait for its record."""
    path = rdzv_file(job_dir, run)
    if node == 0:
        host = socket.gethostname()
        write_json(path, {"host": host, "port": free_port()})
    deadline = time.monotonic() + timeout
    while (found := read_json(path)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"node 0 did not host the rendezvous within {timeout:.0f} s ({path})")
        time.sleep(0.2)
    return f"{found['host']}:{found['port']}"


def ranks_of(agent: int) -> dict[str, int]:
    """The running workers of torchrun's agent ``agent`` (a pid) by replica name (``rank-N``, from
    each worker's ``RANK``)."""
    import psutil

    found: dict[str, int] = {}
    try:
        workers = psutil.Process(agent).children()
    except psutil.Error:
        return found
    for worker in workers:
        try:
            rank = worker.environ().get("RANK")
        except psutil.Error:
            continue
        if rank is not None:
            found[contract.rank_name(int(rank))] = worker.pid
    return found


def sample(job_dir: str, interval: float, agent: int) -> object | None:
    """Start sampling the ranks of this node's agent ``agent`` (a pid; the sampler's thread);
    None when it cannot."""
    if interval <= 0:
        return None
    from ...runtime.sampler import Monitor

    logs = os.path.join(job_dir, contract.LOGS_DIR)
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "") not in ("", "-1")
    monitor = Monitor(
        os.path.join(job_dir, contract.METRICS_DIR),
        interval,
        lambda: ranks_of(agent),
        lambda replica: os.path.join(logs, contract.log_file(replica)),
        say,
        gpus=gpus,
    )
    try:
        monitor.start()
    except Exception as exc:  # never the job's failure
        say(f"no resource samples on this node: {exc}")
        return None
    return monitor


def step_env(job: Mapping[str, str], step: Mapping[str, str]) -> dict[str, str]:
    """A rank's environment in a step that was started for another job (a warm step's): the job's
    (what its launcher exports), with the step's own Slurm variables over it as ``srun`` puts them
    there, and its GPUs unless the job runs CPU processes; less the step's task layout, as here."""
    env = {**job, **{k: v for k, v in step.items() if k.startswith(("SLURM_", "SLURMD_"))}}
    if job.get("CUDA_VISIBLE_DEVICES") != "" and "CUDA_VISIBLE_DEVICES" in step:
        env["CUDA_VISIBLE_DEVICES"] = step["CUDA_VISIBLE_DEVICES"]
    return {k: v for k, v in env.items() if k not in TASK_ENV}


def main(argv: list[str]) -> int:
    if len(argv) < 6 or argv[4] != "--":
        print("usage: python -m jupyter_disttrain.backends.slurm.node JOB_DIR NODE NODES INTERVAL -- CMD...")
        return 2
    job_dir, node, interval, cmd = argv[0], int(argv[1]), float(argv[3]), argv[5:]
    run = os.environ.get(RUN_ENV, "run")
    record: dict[str, object] = {
        "node": node,
        "host": socket.gethostname(),
        "slurm_node": os.environ.get("SLURMD_NODENAME"),
        "job": os.environ.get("SLURM_JOB_ID"),
        "step": os.environ.get("SLURM_STEP_ID"),
        "pid": os.getpid(),
        "run": run,
    }
    write_json(node_file(job_dir, node), record)
    env = {k: v for k, v in os.environ.items() if k not in TASK_ENV}
    try:
        env[RDZV_ENV] = rendezvous(job_dir, run, node)
    except (OSError, TimeoutError) as exc:
        say(f"no rendezvous: {exc}")
        return 1
    stopped: list[str] = []
    signal.signal(signal.SIGTERM, lambda num, frame: stopped.append("SIGTERM"))
    try:
        agent = subprocess.Popen(cmd, env=env)
    except OSError as exc:
        say(f"could not start torchrun: {exc}")
        return 127
    monitor = sample(job_dir, interval, agent.pid)
    code = agent.wait()
    if monitor is not None:
        monitor.stop()  # type: ignore[attr-defined]
    write_json(node_file(job_dir, node), {**record, "exit_code": code, "stopped_by": stopped[:1]})
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
