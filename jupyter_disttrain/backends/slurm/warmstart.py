"""Slurm warm start, from the kernel's side: which jobs fork their ranks from a warm step (``plan``,
for the dry run), and a launcher's agents asked of the allocation's keeper (``start_warm``).

Inside an allocation, a job of one torchrun agent per node without restarts runs warm: the first
such job starts the keeper (``keeper.py``) and, on each node it uses, a warm step
(``warmstep.py``), which it waits for while the zygote imports torch; later jobs fork from those
steps, with no new step. Batch jobs run cold (``--keep-warm`` for them is designed, not built:
docs/warm-start.md#warm-on-the-cluster).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...model.specs import JobSpec
from ...runtime import contract
from ..agents.request import AgentCommand
from ..agents.start import clean_env
from ..warm.plan import (
    ANSWER_TIMEOUT,
    DEFAULT_IDLE,
    HEAVY,
    IDLE_ENV,
    SPAWN_TIMEOUT,
    JobShape,
    WarmPlan,
    WarmUnavailable,
    cold_because,
    env_key,
    fingerprint,
    unseen_packages,
    venv_fingerprint,
)
from ..warm.zygote_protocol import exchange
from . import keeper, pools
from .allocation import Allocation
from .options import SlurmOptions
from .request import BATCH, KEPT, STEP
from .script import START, Place, srun_argv
from .warmstep import WARMSTEP_MODULE

if TYPE_CHECKING:
    from ..warm.warmagent import WarmAgent
    from .request import SlurmRequest

WARM_STEP_NAME = "disttrain-warm"  # the job name of every warm step (squeue --steps shows it)
# Seconds a launcher waits for its agents: a first job waits for its warm step to start and its
# zygote to import torch.
WARM_TIMEOUT = SPAWN_TIMEOUT + 60.0


def keep_warm(opts: SlurmOptions, env: Mapping[str, str]) -> float:
    """Seconds a warm step stays idle: ``--keep-warm``, else ``$DISTTRAIN_WARM_IDLE``, else 30 min."""
    if opts.keep_warm is not None:
        return opts.keep_warm
    with contextlib.suppress(ValueError):
        return max(0.0, float(env.get(IDLE_ENV) or DEFAULT_IDLE))
    return DEFAULT_IDLE


def plan(
    spec: JobSpec, opts: SlurmOptions, place: Place, agents: list[AgentCommand], imports: Iterable[str]
) -> tuple[WarmPlan | None, list[list[str]], str]:
    """Whether a Slurm job forks from warm steps: its plan, each node's warm step command line,
    and the line that says which path it takes and why."""
    if place.mode == BATCH and not opts.keep_warm:
        return (
            None,
            [],
            f"{START} (a batch job: warm steps run inside an allocation, or one kept: --keep-warm)",
        )
    keep = keep_warm(opts, os.environ)
    job_env = agents[0].env
    shape = JobShape(spec.max_restarts, True, foreign_python=False, cold=opts.cold, nodes=spec.nodes)
    why = cold_because(os.environ, job_env, shape)
    why = why or unseen_packages(job_env.get("PYTHONPATH", "")) or ("--keep-warm 0" if keep == 0 else None)
    if why:
        return None, [], f"{START} ({why})"
    fp, key = fingerprint(os.environ), env_key(os.environ)
    try:  # a batch job's keeper listens on its first node: its launcher names the socket there
        path = keeper.socket_path(place.allocation or "0", fp)
    except (WarmUnavailable, OSError) as exc:
        return None, [], f"{START} (no private runtime dir for warm steps: {exc})"
    steps = warm_steps(spec, place, WarmPlan(str(path), fp, (), key), keep)
    preload = tuple(sorted({m.partition(".")[0] for m in imports} & HEAVY))
    if place.mode != STEP:
        return WarmPlan(str(path), fp, preload, key), steps, _batch_line(place, keep)
    if pools.alive(path):
        line = "warm: forked from the warm step on each node (no new step"
    else:
        line = "warm: a warm step starts on each node now (the job waits while it imports torch; re-runs "
        line += "start no step"
    line += f", kept {keep:g} s when idle; --cold for a step of its own)"
    return WarmPlan(str(path), fp, preload, key), steps, line


def _batch_line(place: Place, keep: float) -> str:
    if place.mode == KEPT:
        return (
            f"warm: in kept Slurm job {place.allocation}, forked from its warm step on each node "
            "(no sbatch, no queue, no torch import; --cold for a new batch job)"
        )
    return (
        "warm: a warm step starts on each node of the new batch job (the job waits while it imports "
        f"torch); the batch job is then kept {keep:g} s when idle, holding its nodes and GPUs, and "
        "re-runs of this shape run in it (no sbatch)"
    )


def warm_steps(spec: JobSpec, place: Place, warm: WarmPlan, keep: float) -> list[list[str]]:
    """Each node's warm step command line (the keeper runs it when a job first needs the node)."""
    venv = venv_fingerprint()
    python = [sys.executable, "-u", "-m", WARMSTEP_MODULE, warm.fingerprint, warm.env_key, f"{keep:g}", venv]
    return [
        [*srun_argv(spec, WARM_STEP_NAME, place, node), "--unbuffered", *python] for node in range(spec.nodes)
    ]


def start_ahead(env: Mapping[str, str]) -> str:
    """``%load_ext`` inside an allocation where Slurm is the default backend: node 0's warm step
    started now, without a job (the keeper's ``start`` op), so that the first job forks too.
    What it did, or why not, in words."""
    from .client import SlurmClient

    allocation = Allocation.here()
    if allocation is None:
        return "not inside an allocation"
    keep = keep_warm(SlurmOptions(), env)
    shape = JobShape(0, torchrun_only=True, foreign_python=False, cold=False)
    if why := cold_because(env, {}, shape) or (f"${IDLE_ENV} is 0" if keep == 0 else None):
        return f"no warm step ahead: {why}"
    fp, key = fingerprint(env), env_key(env)
    path = keeper.socket_path(allocation.job, fp)
    place = Place(mode=STEP, version=SlurmClient().version(), gpu=False, allocation=allocation.job)
    (step,) = warm_steps(JobSpec(backend="slurm"), place, WarmPlan(str(path), fp, (), key), keep)
    keeper.ensure(path, env, key)
    deadline = time.monotonic() + ANSWER_TIMEOUT
    while True:  # its socket appears once it has started
        try:
            answer = exchange(path, {"op": "start", "node": 0, "warm_step": step}, ANSWER_TIMEOUT)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                return "no warm step ahead: its keeper did not start"
            time.sleep(0.05)
    return (
        "node 0's warm step is starting" if answer.get("ok") else f"no warm step ahead: {answer.get('error')}"
    )


def start_warm(job_dir: str, request: SlurmRequest) -> list[WarmAgent]:
    """The job's agents forked by the warm step of each node (started now where a node has none);
    WarmUnavailable when one cannot be (those already forked are stopped: the job starts cold).
    The nodes are asked at once: a first job's warm steps import torch side by side."""
    from concurrent.futures import ThreadPoolExecutor

    from ..warm.warmagent import ask

    warm = WarmPlan.from_json(request.warm or {})
    keeper.ensure(Path(warm.socket), os.environ, warm.env_key)
    env = clean_env(dict(os.environ))
    messages = [
        _spawn_request(warm, job_dir, request, agent, step, env)
        for agent, step in zip(request.agents, request.warm_steps, strict=True)
    ]
    with ThreadPoolExecutor(len(messages)) as pool:
        asked = [pool.submit(ask, warm.socket, message, WARM_TIMEOUT, remote=True) for message in messages]
    failed = [exc for f in asked if (exc := f.exception()) is not None]
    started = [f.result() for f in asked if f.exception() is None]
    if not failed:
        return started
    for forked in started:
        forked.kill()
    first = failed[0]
    if isinstance(first, TimeoutError):
        raise WarmUnavailable(f"no answer within {WARM_TIMEOUT:.0f} s") from None
    if isinstance(first, (WarmUnavailable, ValueError)):
        raise WarmUnavailable(str(first)) from None
    raise first


def _spawn_request(
    warm: WarmPlan,
    job_dir: str,
    request: SlurmRequest,
    agent: AgentCommand,
    step: list[str],
    env: dict[str, str],
) -> dict[str, Any]:
    """The zygote's spawn request for ``agent`` (its torchrun command line, after the node agent's
    in the cold one), and what the keeper and the warm step need around it."""
    log = os.path.join(job_dir, contract.LOGS_DIR, contract.log_file(contract.agent_name(agent.node)))
    return {
        "op": "spawn",
        "node": agent.node,
        "nodes": len(request.agents),
        "warm_step": step,
        "fingerprint": warm.fingerprint,
        "job_dir": job_dir,
        "argv": agent.argv[agent.argv.index("--") + 1 :],
        "env": {**env, **agent.env},
        "cwd": request.cwd or job_dir,
        "log": log,
        "preload": list(warm.preload),
        "interval": request.node_monitor_interval,
    }
