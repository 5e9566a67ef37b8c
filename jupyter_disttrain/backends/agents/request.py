"""The local backend's launch request, typed: what ``--dry-run`` shows and ``job.json`` keeps.

The launcher reads it back at start (``launch``), so this module imports little.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ...launchers.base import Role, recorded_roles
from ...model.specs import JobSpec
from ...runtime.sampler import DEFAULT_INTERVAL

# The defaults of the local options (``options.LocalOptions``), and of a request that lacks a field.
DEFAULT_GRACE_PERIOD = 10.0
DEFAULT_EXIT_TIMEOUT = 300.0
DEFAULT_MONITOR_INTERVAL = DEFAULT_INTERVAL  # the samplers' own default


@dataclass(frozen=True)
class AgentCommand:
    """One torchrun agent (one "node") with the env it adds to the inherited one."""

    node: int
    argv: list[str]
    env: dict[str, str]
    role: str = "worker"  # the role whose replicas it starts (launchers/base.py)
    # A process role's replica that this command is (``server-0``: its own log and exit code);
    # None for an agent (torchrun, horovodrun) that starts ranks.
    replica: str | None = None


@dataclass(frozen=True)
class LocalRequest:
    """Where the job's torchrun agents run, their command lines and env, and how it is stopped."""

    cwd: str
    agents: list[AgentCommand] = field(default_factory=list)
    grace_period: float = DEFAULT_GRACE_PERIOD
    exit_timeout: float = DEFAULT_EXIT_TIMEOUT
    device: str = "cpu"  # "cuda" when the agents got GPUs
    # The job's roles as its launcher laid them out (``Role.to_json``); none in jobs recorded
    # before roles: their ranks are the role "worker".
    roles: list[dict[str, Any]] = field(default_factory=list)
    cache_dir: str | None = None  # the per-user cache the launcher's roles use (compiled ops)
    monitor_interval: float = DEFAULT_MONITOR_INTERVAL  # seconds between resource samples; 0: none
    # Warm start (``warm.WarmPlan.to_json``): the zygote the agent is forked from; None: torchrun
    # afresh. ``start`` says which, and why (the dry run shows it, the job's events repeat it).
    warm: dict[str, Any] | None = None
    start: str = ""
    # The stall and idle guard (``monitoring.guard.GuardSettings.to_json``), resolved at submit
    # from the flags and $DISTTRAIN_GUARD; {}: a job recorded before the guard, not guarded.
    guard: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LocalRequest:
        agents = [
            AgentCommand(
                int(a["node"]),
                list(a["argv"]),
                dict(a["env"]),
                str(a.get("role", "worker")),
                a.get("replica"),
            )
            for a in data.get("agents", [])
        ]
        return cls(
            cwd=str(data.get("cwd") or ""),
            agents=agents,
            grace_period=float(data.get("grace_period", DEFAULT_GRACE_PERIOD)),
            exit_timeout=float(data.get("exit_timeout", DEFAULT_EXIT_TIMEOUT)),
            device=str(data.get("device", "cpu")),
            roles=list(data.get("roles", [])),
            cache_dir=data.get("cache_dir"),
            # A job recorded before monitoring existed was never sampled.
            monitor_interval=float(data.get("monitor_interval", 0.0)),
            warm=data.get("warm") if isinstance(data.get("warm"), dict) else None,
            start=str(data.get("start") or ""),
            guard=dict(data.get("guard") or {}),
        )


def request_roles(spec: JobSpec, request: LocalRequest) -> list[Role]:
    """The roles a local job runs: as recorded, or torchrun's workers for a job recorded before roles."""
    return recorded_roles(spec, request.roles)


class AgentProcess(Protocol):
    """A started agent or replica process as the supervisor drives it: a ``subprocess.Popen``, or
    a ``warmagent.WarmAgent`` forked by the zygote."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def terminate(self) -> None: ...
