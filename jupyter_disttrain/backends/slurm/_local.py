"""What the Slurm backend reuses of the local backend, imported in this one place.

A Slurm job runs the local backend's launcher and supervisor; its agents are ``srun`` commands,
one per node, each running the same torchrun agent under the same rank wrapper. (The local
backend is being moved into a package of its own: this module is where its paths change.)
"""

from __future__ import annotations

from ..local import spawn_launcher
from ..local_launch import start_agents
from ..local_request import DEFAULT_GRACE_PERIOD, AgentCommand, LocalRequest, request_roles
from ..local_supervisor import LAUNCHER_FILE, Supervisor, last_line
from ..torchrun import WORKER_MODULE

__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "LAUNCHER_FILE",
    "WORKER_MODULE",
    "AgentCommand",
    "LocalRequest",
    "Supervisor",
    "last_line",
    "request_roles",
    "spawn_launcher",
    "start_agents",
]
