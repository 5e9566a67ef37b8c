"""Pure translation of a ``JobSpec`` into torchrun command lines for this machine.

No process is started here, so the output can be compared line by line in tests and shown
as it is by ``--dry-run``.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence

from ...launchers.base import Role, default_roles
from ...model.specs import JobSpec
from ...runtime import contract
from ..agents.request import AgentCommand
from ..agents.torchrun import WORKER_MODULE, torchrun_argv
from ..rankenv import rank_env
from .python import foreign_pythonpath

# torchrun's own flags, in the words torchrun uses; a ``--nodes M`` job on one machine
# becomes M agents that meet through a c10d rendezvous hosted by the first one, in stores that
# listen on loopback only (``runtime/rendezvous.py``; a single agent's store takes any free port).
RDZV_BACKEND = "disttrain-loopback"
LOOPBACK = "127.0.0.1"
# The collectives' own sockets: gloo and NCCL listen on the address of this interface.
LOOPBACK_IFNAME = "lo"
_SOCKET_IFNAME_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def local_env(
    spec: JobSpec,
    job_id: str,
    job_dir: str,
    role: Role,
    *,
    cpu: bool,
    working_dir: str,
    runtime_path: str | None = None,
) -> dict[str, str]:
    """What every process of ``role`` adds on this machine: the rank env, where its log goes,
    collectives on loopback, and (``runtime_path``) the way another interpreter imports our
    rank wrapper (``python``), last on PYTHONPATH."""
    # Imports next to the notebook keep working: the script runs from the job dir, the
    # working dir is on PYTHONPATH (launch.rank_env, the same on every backend).
    env = rank_env(
        spec, job_id, job_dir, cpu=cpu, working_dir=working_dir, inherited=os.environ, role_env=role.env
    )
    env[contract.LOG_DIR_ENV] = os.path.join(job_dir, contract.LOGS_DIR)
    for key in _SOCKET_IFNAME_ENV:  # ranks meet on this machine: nothing of theirs listens beyond it
        env.setdefault(key, LOOPBACK_IFNAME)
    if runtime_path:
        env["PYTHONPATH"] = foreign_pythonpath(env.get("PYTHONPATH", ""), runtime_path)
    return env


def set_devices(env: dict[str, str], spec: JobSpec, gpu_ids: Sequence[str] | None, slot: int) -> None:
    """The GPUs of the ``slot``-th agent or process: its ``--gpus`` share, none on CPU, or what
    the user chose with ``--env CUDA_VISIBLE_DEVICES`` (already in ``env``)."""
    if "CUDA_VISIBLE_DEVICES" in spec.env:
        return
    if gpu_ids is None:
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        n = spec.nproc_per_node
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids[slot * n : (slot + 1) * n])


def agent_commands(
    spec: JobSpec,
    job_id: str,
    job_dir: str,
    *,
    python: str,
    rdzv_port: int | None,
    gpu_ids: Sequence[str] | None,
    working_dir: str,
    role: Role | None = None,
    runtime_path: str | None = None,
) -> list[AgentCommand]:
    """torchrun agents that run ``spec`` on this machine.

    Each node is one agent; several agents meet on ``rdzv_port`` (one agent: a free port it
    picks itself), the first one hosts the rendezvous store.
    ``gpu_ids`` None means CPU processes (gloo); otherwise each agent sees its own GPUs, one
    per local rank. ``role``: the launcher's role these agents start (its script arguments and
    env); the spec's own arguments, as a plain torchrun worker, when None.
    """
    role = role or default_roles(spec)[0]
    program = [os.path.join(job_dir, spec.entrypoint), *role.args]
    base_env = local_env(
        spec, job_id, job_dir, role, cpu=gpu_ids is None, working_dir=working_dir, runtime_path=runtime_path
    )
    commands = []
    for node in range(spec.nodes):
        if spec.nodes > 1 and rdzv_port is None:
            raise ValueError("a multi-node job needs a rendezvous port")
        endpoint = f"{LOOPBACK}:{rdzv_port or 0}"
        argv = torchrun_argv(
            python,
            spec,
            job_id,
            node,
            program,
            rdzv_backend=RDZV_BACKEND,
            log_dir=os.path.join(job_dir, contract.ELASTIC_DIR),
            endpoint=endpoint,
            local_addr=LOOPBACK,
        )
        env = dict(base_env)
        env[contract.NODE_ENV] = str(node)
        set_devices(env, spec, gpu_ids, node)
        commands.append(AgentCommand(node=node, argv=argv, env=env, role=role.name))
    return commands


RUN_SH = "run.sh"
# The job's bookkeeping, not the training's: a run by hand writes to the terminal, and a cancel
# of the job (which finds processes by DISTTRAIN_JOB_ID) must not stop it.
_JOB_ONLY_ENV = (contract.JOB_ID_ENV, contract.LOG_DIR_ENV, contract.NODE_ENV, contract.REPLICA_ENV)
# Where a parameter-server job's processes meet: a by-hand run takes a port free then.
_MEET_PORT_ENV = "DMLC_PS_ROOT_PORT"
_FREE_PORT = 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'


def by_hand_script(agents: Sequence[AgentCommand], cwd: str) -> str:
    """``run.sh``: the job's torchrun command(s) on its script, to run by hand next to it.

    Derived from the launch request's agents: the same torchrun flags, working dir and env
    (``PYTHONPATH`` first among them, so local modules import), minus the rank wrapper and the
    job's bookkeeping. Every value is shell-quoted; the only shell words are fixed ones here.
    Arguments given to ``bash run.sh`` replace the job's script arguments.
    """
    argvs = [agent.argv for agent in agents]
    envs = [agent.env for agent in agents]
    shared = {k: v for k, v in envs[0].items() if k not in _JOB_ONLY_ENV and all(e.get(k) == v for e in envs)}
    worker = argvs[0].index(WORKER_MODULE)
    script, args = argvs[0][worker + 1], argvs[0][worker + 2 :]
    lines = [
        "#!/usr/bin/env bash",
        "# This job's script run by hand as the job ran it: bash run.sh [SCRIPT ARGS...]",
        "# (arguments given here replace the job's own).",
        "set -euo pipefail",
        'here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        f"cd {shlex.quote(cwd)}",
        f"if [ $# -eq 0 ]; then set -- {shlex.join(args)}; fi",
    ]
    pythonpath = shared.pop("PYTHONPATH", None)
    if pythonpath:
        lines.append(f'export PYTHONPATH={shlex.quote(pythonpath)}"${{PYTHONPATH:+:$PYTHONPATH}}"')
    several = len(argvs) > 1
    if several:  # agents meet on a port free now, not the one the job had
        lines.append(f"port=$({shlex.quote(argvs[0][0])} -c {shlex.quote(_FREE_PORT)})")
        lines.append("pids=()")
    lines += [
        f'export {k}="$port"' if several and k == _MEET_PORT_ENV else f"export {k}={shlex.quote(v)}"
        for k, v in sorted(shared.items())
    ]
    skip = {*shared, *_JOB_ONLY_ENV, "PYTHONPATH"}
    for argv, env in zip(argvs, envs, strict=True):
        own = {k: v for k, v in env.items() if k not in skip}
        line = _agent_line(argv, own, os.path.basename(script), fresh_port=several)
        lines.append(line + (' & pids+=("$!")' if several else ""))
    if several:
        lines.append('rc=0; for p in "${pids[@]}"; do wait "$p" || rc=$?; done; exit "$rc"')
    return "\n".join(lines) + "\n"


def _agent_line(argv: list[str], own_env: dict[str, str], script_name: str, *, fresh_port: bool) -> str:
    """One agent's torchrun command in run.sh, on the script beside it, with the arguments given."""
    words = [f"{k}={shlex.quote(v)}" for k, v in sorted(own_env.items())]
    for arg in argv[: argv.index(WORKER_MODULE) - 1]:  # up to ``-m jupyter_disttrain.runtime.worker``
        if fresh_port and arg.startswith("--rdzv-endpoint="):
            words.append(shlex.quote(arg.rsplit(":", 1)[0] + ":") + '"$port"')
        elif arg.startswith("--log-dir="):  # beside run.sh, wherever it was copied to
            words.append('--log-dir="$here"/' + shlex.quote(contract.ELASTIC_DIR))
        else:
            words.append(shlex.quote(arg))
    words += [f'"$here"/{shlex.quote(script_name)}', '"$@"']
    return ("env " if own_env else "") + " ".join(words)
