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
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...model.specs import JobSpec
from ...runtime import contract
from ..agents.request import AgentCommand
from ..agents.start import clean_env
from ..warm.plan import (
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
from . import keeper, pools
from .options import SlurmOptions
from .request import STEP
from .script import START, Place, srun_argv
from .warmstep import WARMSTEP_MODULE

if TYPE_CHECKING:
    from ..warm.warmagent import WarmAgent
    from .request import SlurmRequest

WARM_STEP_NAME = "disttrain-warm"  # the job name of every warm step (squeue --steps shows it)
# Seconds a launcher waits for its agents: a first job waits for its warm step to start and its
# zygote to import torch.
WARM_TIMEOUT = SPAWN_TIMEOUT + 60.0


def keep_warm(opts: SlurmOptions, env: dict[str, str] | os._Environ[str]) -> float:
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
    if place.mode != STEP or place.allocation is None:
        return None, [], f"{START} (a batch job: warm steps run inside an allocation)"
    keep = keep_warm(opts, os.environ)
    job_env = agents[0].env
    shape = JobShape(spec.nodes, spec.max_restarts, torchrun_only=True, foreign_python=False, cold=opts.cold)
    why = cold_because(os.environ, job_env, shape)
    why = why or unseen_packages(job_env.get("PYTHONPATH", "")) or ("--keep-warm 0" if keep == 0 else None)
    if why:
        return None, [], f"{START} ({why})"
    fp, key, venv = fingerprint(os.environ), env_key(os.environ), venv_fingerprint()
    try:
        path = keeper.socket_path(place.allocation, fp)
    except (WarmUnavailable, OSError) as exc:
        return None, [], f"{START} (no private runtime dir for warm steps: {exc})"
    steps = [
        [
            *srun_argv(spec, WARM_STEP_NAME, place, node),
            "--unbuffered",
            sys.executable,
            "-u",
            "-m",
            WARMSTEP_MODULE,
            fp,
            key,
            f"{keep:g}",
            venv,
        ]
        for node in range(spec.nodes)
    ]
    preload = tuple(sorted({m.partition(".")[0] for m in imports} & HEAVY))
    if pools.alive(path):
        line = "warm: forked from the warm step on each node (no new step"
    else:
        line = "warm: a warm step starts on each node now (the job waits while it imports torch; re-runs "
        line += "start no step"
    line += f", kept {keep:g} s when idle; --cold for a step of its own)"
    return WarmPlan(str(path), fp, preload, key), steps, line


def start_warm(job_dir: str, request: SlurmRequest) -> list[WarmAgent]:
    """The job's agents forked by the warm step of each node (started now where a node has none);
    WarmUnavailable when one cannot be (those already forked are stopped: the job starts cold)."""
    from ..warm.warmagent import ask

    warm = WarmPlan.from_json(request.warm or {})
    keeper.ensure(Path(warm.socket), os.environ, warm.env_key)
    env = clean_env(dict(os.environ))
    started: list[WarmAgent] = []
    try:
        for agent, step in zip(request.agents, request.warm_steps, strict=True):
            message = _spawn_request(warm, job_dir, request, agent, step, env)
            started.append(ask(warm.socket, message, WARM_TIMEOUT, remote=True))
    except (TimeoutError, WarmUnavailable, ValueError) as exc:
        for forked in started:
            forked.kill()
        if isinstance(exc, TimeoutError):
            raise WarmUnavailable(f"no answer within {WARM_TIMEOUT:.0f} s") from None
        raise WarmUnavailable(str(exc)) from None
    return started


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
