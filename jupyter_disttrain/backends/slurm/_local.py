"""What the Slurm backend reuses of the local backend (``backends/local/``), imported in this one place.

A Slurm job runs the local backend's launcher and supervisor; its agents are ``srun`` commands,
one per node, each running the same torchrun agent under the same rank wrapper. Never warm: its
ranks start on the job's nodes, not from the zygote on the kernel's machine (``SlurmRequest.warm``
is always None), so the local launcher's ``start`` starts its agents cold, as ``request.start``
says. (``options.py`` takes the supervisor's options from ``backends/local/options.py`` itself:
the registry loads it without any backend, and this module imports the local backend's.)
"""

from __future__ import annotations

from ..local.backend import spawn_launcher
from ..local.launch import start
from ..local.request import AgentCommand, AgentProcess, LocalRequest, request_roles
from ..local.supervisor import LAUNCHER_FILE, Supervisor
from ..local.torchrun import WORKER_MODULE

__all__ = [
    "LAUNCHER_FILE",
    "WORKER_MODULE",
    "AgentCommand",
    "AgentProcess",
    "LocalRequest",
    "Supervisor",
    "request_roles",
    "spawn_launcher",
    "start",
]
