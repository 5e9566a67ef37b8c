"""Entry point of a local job's launcher: start the torchrun agents first, then supervise.

``python -m jupyter_disttrain.backends.local.launch JOB_DIR`` (job records and process listings
name this module: it stays here). The agents start warm when the request says so and the zygote
can give one, else cold (``agents/start.py``); the shared supervisor then drives them.
"""

from __future__ import annotations

import json
import os
import sys

from ...runtime import contract
from ..agents.request import AgentProcess, LocalRequest
from ..agents.start import clean_env, start_cold

TYPE_CHECKING = False  # not typing's: this module is on the launch's critical path
if TYPE_CHECKING:
    from ..warm.warmagent import WarmAgent


def start_warm(job_dir: str, request: LocalRequest) -> tuple[list[WarmAgent], str]:
    """The job's agents (one per node) forked by its zygote (``warm``), and the line that says so;
    raises ``WarmUnavailable`` when the zygote cannot give one (those forked are stopped: the job
    then starts cold)."""
    from ..warm.plan import WarmPlan
    from ..warm.warmagent import spawn

    plan = WarmPlan.from_json(request.warm or {})
    env = clean_env(dict(os.environ))
    forked: list[WarmAgent] = []
    try:
        for agent in request.agents:
            log = os.path.join(job_dir, contract.LOGS_DIR, contract.log_file(contract.agent_name(agent.node)))
            cwd = request.cwd or job_dir
            forked.append(
                spawn(plan, job_dir=job_dir, argv=agent.argv, env={**env, **agent.env}, cwd=cwd, log=log)
            )
    except BaseException:
        for started in forked:
            started.kill()
        raise
    pids = ", ".join(str(agent.pid) for agent in forked)
    return forked, f"warm: forked from the zygote (agent pid{'s' if len(forked) > 1 else ''} {pids})"


def start(job_dir: str, request: LocalRequest) -> tuple[list[AgentProcess], str, str | None]:
    """The job's agents started (warm when the request says so and the zygote can give one, else
    cold), the line saying how, and the error that kept them from starting."""
    how = request.start
    if request.warm:
        from ..warm.plan import WarmUnavailable

        try:
            agents, how = start_warm(job_dir, request)
            return list(agents), how, None
        except WarmUnavailable as exc:
            how = f"cold: the warm zygote could not start it ({exc})"
    return start_cold(job_dir, request, how)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m jupyter_disttrain.backends.local.launch JOB_DIR", file=sys.stderr)
        return 2
    job_dir = os.path.abspath(argv[0])
    with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as f:
        request = LocalRequest.from_json(json.load(f)["request"])
    agents, how, error = start(job_dir, request)
    from ..agents.supervisor import Supervisor
    from ..warm.plan import serves_others

    return Supervisor(job_dir, agents, error, how, spare=serves_others).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
