"""Entry point of a local job's launcher: start the torchrun agents first, then supervise.

``python -m jupyter_disttrain.backends.local.launch JOB_DIR``. The agents are on the critical
path from "run the cell" to "first line of training code", so this module imports only what
starting them needs; the supervisor and its imports load while torchrun starts up.
"""

from __future__ import annotations

import ctypes
import json
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

    from .warm import WarmAgent

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


def start_warm(job_dir: str, request: LocalRequest) -> tuple[list[WarmAgent], str]:
    """The job's one agent forked by its zygote (``warm``), and the line that says so; raises
    ``WarmUnavailable`` when the zygote cannot give one (the job then starts cold)."""
    from .warm import WarmPlan, spawn

    plan = WarmPlan.from_json(request.warm or {})
    env = clean_env(dict(os.environ))
    agent = request.agents[0]
    log = os.path.join(job_dir, contract.LOGS_DIR, contract.log_file(contract.agent_name(agent.node)))
    forked = spawn(
        plan, job_dir=job_dir, argv=agent.argv, env={**env, **agent.env}, cwd=request.cwd or job_dir, log=log
    )
    return [forked], f"warm: forked from the zygote (agent pid {forked.pid})"


def start(
    job_dir: str, request: LocalRequest, what: str = "torchrun"
) -> tuple[list[AgentProcess], str, str | None]:
    """The job's agents started (warm when the request says so and the zygote can give one, else
    cold), the line saying how (the supervisor's Started event repeats it), and the error that
    kept them from starting (``what`` names the program then). A request without ``warm`` (a
    cold local job; every Slurm job, whose agents are ``srun`` steps) starts cold as it says."""
    how = request.start
    if request.warm:
        from .warm import WarmUnavailable

        try:
            agents, how = start_warm(job_dir, request)
            return list(agents), how, None
        except WarmUnavailable as exc:
            how = f"cold: the warm zygote could not start it ({exc})"
    try:
        return list(start_agents(job_dir, request)), how, None
    except OSError as exc:
        return [], how, f"could not start {what}: {exc}"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m jupyter_disttrain.backends.local.launch JOB_DIR", file=sys.stderr)
        return 2
    job_dir = os.path.abspath(argv[0])
    with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as f:
        request = LocalRequest.from_json(json.load(f)["request"])
    agents, how, error = start(job_dir, request)
    from .supervisor import Supervisor

    return Supervisor(job_dir, agents, error, how).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
