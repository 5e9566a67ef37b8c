"""A launcher's first step: start the job's agents, cold, from its request.

Every launcher of ours runs it before its supervisor: the local one
(``backends/local/launch.py``, which first tries the warm zygote) and Slurm's
(``backends/slurm/launch.py``, whose agents are ``srun`` steps). The agents are on the critical
path from "run the cell" to "first line of training code", so this module imports only what
starting them needs; the supervisor and its imports load while torchrun starts up.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

from ...runtime import contract
from ...runtime.atomic import open_own
from .request import AgentProcess, LocalRequest

TYPE_CHECKING = False  # not typing's: this module is on the launch's critical path
if TYPE_CHECKING:
    from collections.abc import Callable

# Set by ipykernel for the kernel's own use; wrong or harmful in a training process.
_KERNEL_ONLY_ENV = ("JPY_PARENT_PID", "JPY_SESSION_NAME", "PYDEVD_USE_FRAME_EVAL")


def clean_env(base: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in _KERNEL_ONLY_ENV}
    if env.get("MPLBACKEND", "").startswith("module://matplotlib_inline"):
        del env["MPLBACKEND"]
    return env


_PR_SET_PDEATHSIG = 1


def _die_with(launcher: int) -> Callable[[], None]:
    """What an agent runs before exec: the kernel sends it SIGTERM when the launcher dies (even
    by SIGKILL), and torchrun then stops its workers, so a lost launcher leaves no orphans."""

    def set_parent_death_signal() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != launcher:  # it died before the line above took effect
            os._exit(1)

    return set_parent_death_signal


def start_agents(job_dir: str, request: LocalRequest) -> list[subprocess.Popen[bytes]]:
    """One torchrun agent per node, output appended to ``logs/agent-<node>.log``; one process per
    replica of a process role, appended to ``logs/<replica>.log``."""
    env = clean_env(dict(os.environ))
    die_with_launcher = _die_with(os.getpid()) if sys.platform == "linux" else None
    cwd = request.cwd or job_dir
    agents = []
    for agent in request.agents:
        # A replica process writes its own log (the wrapper points its output there at start;
        # before that, an interpreter that cannot start the wrapper says why there too).
        log = contract.log_file(agent.replica or contract.agent_name(agent.node))
        with os.fdopen(open_own(os.path.join(job_dir, contract.LOGS_DIR, log)), "ab") as out:
            agents.append(
                subprocess.Popen(
                    agent.argv,
                    env={**env, **agent.env},
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    preexec_fn=die_with_launcher,
                )
            )
    return agents


def start_cold(
    job_dir: str, request: LocalRequest, how: str, what: str = "torchrun"
) -> tuple[list[AgentProcess], str, str | None]:
    """The job's agents started cold, the line saying how (``how``: the supervisor's Started
    event repeats it), and the error that kept them from starting (``what`` names the program
    then)."""
    try:
        return list(start_agents(job_dir, request)), how, None
    except OSError as exc:
        return [], how, f"could not start {what}: {exc}"
