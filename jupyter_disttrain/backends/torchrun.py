"""Pure translation of a ``JobSpec`` into torchrun command lines for this machine.

No process is started here, so the output can be compared line by line in tests and shown
as it is by ``--dry-run``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from ..specs import JobSpec

WORKER_MODULE = "jupyter_disttrain.runtime.worker"
# torchrun's own flags, in the words torchrun uses; a ``--nodes M`` job on one machine
# becomes M agents that meet through a c10d rendezvous hosted by the first one.
_LOCALHOST = "127.0.0.1"


@dataclass(frozen=True)
class AgentCommand:
    """One torchrun agent (one "node") with the env it adds to the inherited one."""

    node: int
    argv: list[str]
    env: dict[str, str]

    def to_dict(self) -> dict[str, object]:
        return {"node": self.node, "argv": self.argv, "env": self.env}


def job_env(spec: JobSpec, job_id: str, job_dir: str) -> dict[str, str]:
    """The variables every training process gets on top of torchrun's (RANK, WORLD_SIZE...)."""
    env = {
        "DISTTRAIN_JOB_ID": job_id,
        "DISTTRAIN_JOB_DIR": job_dir,
        "DISTTRAIN_TENSORBOARD_DIR": spec.tensorboard_dir or os.path.join(job_dir, "tensorboard"),
        "PYTHONUNBUFFERED": "1",
    }
    env.update(spec.env)
    return env


def agent_commands(
    spec: JobSpec,
    job_id: str,
    job_dir: str,
    *,
    python: str,
    rdzv_port: int | None,
    gpu_ids: Sequence[str] | None,
    working_dir: str,
) -> list[AgentCommand]:
    """torchrun agents that run ``spec`` on this machine.

    One node runs ``--standalone`` (torchrun picks its own port). Several nodes run as several
    agents joined by c10d rendezvous on ``rdzv_port``; the first agent hosts the store.
    ``gpu_ids`` None means CPU processes (gloo); otherwise each agent sees its own GPUs, one
    per local rank.
    """
    script = os.path.join(job_dir, spec.entrypoint)
    base_env = job_env(spec, job_id, job_dir)
    base_env["DISTTRAIN_LOG_DIR"] = os.path.join(job_dir, "logs")
    # Imports next to the notebook keep working: the script runs from the job dir.
    # The job's own entries (--env PYTHONPATH, the kernel's sys.path additions) come first;
    # the working dir stays on it either way, then the inherited ones.
    paths = [spec.env.get("PYTHONPATH"), working_dir, os.environ.get("PYTHONPATH")]
    base_env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    if spec.nproc_per_node > 1 and "OMP_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in spec.env:
        # torchrun's own default, said once here instead of in a banner at the top of every log.
        base_env["OMP_NUM_THREADS"] = "1"
    commands = []
    for node in range(spec.nodes):
        argv = [python, "-m", "torch.distributed.run"]
        if spec.nodes == 1:
            argv += ["--standalone", "--nnodes=1"]
        else:
            if rdzv_port is None:
                raise ValueError("a multi-node job needs a rendezvous port")
            argv += [
                f"--nnodes={spec.nodes}",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint={_LOCALHOST}:{rdzv_port}",
                f"--rdzv-id={job_id}",
                f"--rdzv-conf=is_host={'true' if node == 0 else 'false'}",
                f"--local-addr={_LOCALHOST}",
            ]
        argv += [
            f"--nproc-per-node={spec.nproc_per_node}",
            f"--max-restarts={spec.max_restarts}",
            "-m",
            WORKER_MODULE,
            script,
            *spec.args,
        ]
        env = dict(base_env)
        env["DISTTRAIN_NODE"] = str(node)
        if "CUDA_VISIBLE_DEVICES" in spec.env:
            pass  # the user chose the devices (--env): job_env already put them in
        elif gpu_ids is None:
            env["CUDA_VISIBLE_DEVICES"] = ""
        else:
            n = spec.nproc_per_node
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids[node * n : (node + 1) * n])
        commands.append(AgentCommand(node=node, argv=argv, env=env))
    return commands
