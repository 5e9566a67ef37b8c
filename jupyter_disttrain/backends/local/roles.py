"""Pure translation of the roles that are not torchrun's into command lines for this machine.

- a ``process`` role (a parameter-server job's scheduler, servers, workers): one process per
  replica, ``python -m jupyter_disttrain.runtime.worker SCRIPT ARGS`` named by
  ``DISTTRAIN_REPLICA``, its output in ``logs/<replica>.log``;
- a ``horovodrun`` role: one ``horovodrun -np N --gloo`` on loopback, whose ranks run under the
  same wrapper (``rank-<N>``, from ``HOROVOD_RANK``); its own output goes to ``logs/agent-0.log``.

No process is started here: the dry run shows these lines as they are.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ...launchers.base import HOROVODRUN, Role
from ...model.specs import JobSpec
from ...runtime import contract
from ..agents.request import AgentCommand
from ..agents.torchrun import WORKER_MODULE
from .torchrun import LOOPBACK_IFNAME, local_env, set_devices

HOROVOD_LOCAL = "jupyter_disttrain.launchers.horovod_local"  # horovodrun, its servers on loopback
# Roles whose processes compute: they get --gpus GPUs each; the others (a scheduler, a server)
# none, so they never take a GPU from a worker.
COMPUTE_ROLES = ("worker",)


def role_commands(
    spec: JobSpec,
    job_id: str,
    job_dir: str,
    role: Role,
    *,
    python: str,
    gpu_ids: Sequence[str] | None,
    working_dir: str,
    runtime_path: str | None = None,
) -> list[AgentCommand]:
    """The commands of a ``process`` or ``horovodrun`` role (torchrun's: ``torchrun.agent_commands``)."""
    script = os.path.join(job_dir, spec.entrypoint)
    env = local_env(
        spec, job_id, job_dir, role, cpu=gpu_ids is None, working_dir=working_dir, runtime_path=runtime_path
    )
    tail = [python, "-m", WORKER_MODULE, script, *role.args]
    if role.via == HOROVODRUN:
        return [_horovodrun(spec, role, env, tail, gpu_ids)]
    commands = []
    for index, replica in enumerate(role.replica_names()):
        own = {**env, contract.REPLICA_ENV: replica}
        set_devices(own, spec, gpu_ids if role.name in COMPUTE_ROLES else None, index)
        commands.append(AgentCommand(node=0, argv=tail, env=own, role=role.name, replica=replica))
    return commands


def _horovodrun(
    spec: JobSpec, role: Role, env: dict[str, str], tail: list[str], gpu_ids: Sequence[str] | None
) -> AgentCommand:
    """``horovodrun`` starting ``role.replicas`` ranks on this machine with the gloo controller,
    its collectives on the loopback interface and its rendezvous store bound to it
    (``launchers.horovod_local``: Horovod's own binds every interface)."""
    env = {**env, contract.NODE_ENV: "0"}
    set_devices(env, spec, gpu_ids, 0)
    n = str(role.replicas)
    hvd = ["-m", HOROVOD_LOCAL, "-np", n, "-H", f"localhost:{n}", "--gloo"]
    argv = [tail[0], *hvd, "--network-interfaces", LOOPBACK_IFNAME, *tail]
    return AgentCommand(node=0, argv=argv, env=env, role=role.name)
