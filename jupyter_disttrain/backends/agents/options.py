"""What a job's supervisor is told (``SupervisorOptions``), declared once for every backend whose
jobs it supervises (the local one and Slurm's), and the checks of those values.

The backend registry loads the options modules that build on it without any backend
(``backends.options_class``), so this module imports only the model and the guard's options.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...model.errors import InvalidSpecError
from ...model.flags import option
from ...monitoring.guard import GuardOptions
from .request import DEFAULT_EXIT_TIMEOUT, DEFAULT_GRACE_PERIOD, DEFAULT_MONITOR_INTERVAL

MAX_GRACE_PERIOD = 300.0  # seconds a cancel waits for SIGTERM before SIGKILL, at most
MAX_MONITOR_INTERVAL = 3600.0


def validate_grace_period(value: object, field: str = "grace_period") -> float:
    """A cancel's grace period: a finite number of seconds from 0 to ``MAX_GRACE_PERIOD``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 <= value <= MAX_GRACE_PERIOD
    ):
        raise InvalidSpecError(
            f"{field} must be a number of seconds from 0 to {MAX_GRACE_PERIOD:.0f}, not {value!r}"
        )
    return float(value)


def validate_monitor_interval(value: object, field: str = "monitor_interval") -> float:
    """Seconds between resource samples: 0 (off), or from 0.2 to ``MAX_MONITOR_INTERVAL``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not (value == 0 or 0.2 <= value <= MAX_MONITOR_INTERVAL)
    ):
        raise InvalidSpecError(
            f"{field} must be 0 (off) or a number of seconds from 0.2 to {MAX_MONITOR_INTERVAL:.0f}, "
            f"not {value!r}"
        )
    return float(value)


def validate_exit_timeout(value: object, field: str = "exit_timeout") -> float:
    """How long a rank may hang at exit after a peer finished: a finite number of seconds > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == math.inf:
        raise InvalidSpecError(f"{field} must be a number of seconds greater than 0, not {value!r}")
    return float(value)


def validate_switch(value: object, field: str) -> bool:
    """A switch: true or false."""
    if not isinstance(value, bool):
        raise InvalidSpecError(f"{field} must be true or false, not {value!r}")
    return value


@dataclass(frozen=True)
class SupervisorOptions(GuardOptions):
    """What a job's supervisor (``supervisor.Supervisor``) is told: how a cancel stops the job,
    when a hang at exit is said, how often resources are sampled, and its stall and idle guard
    (which the launcher runs). Every backend whose jobs it supervises has them (the local one,
    and Slurm's, whose launcher it is): decided here once."""

    exit_timeout: float = option(
        DEFAULT_EXIT_TIMEOUT,
        check=validate_exit_timeout,
        parse=float,
        metavar="SECONDS",
        help="local and slurm backends: seconds a rank may stay silent without exiting after another "
        "rank finished before the job says it is stuck (once every rank's script ended: stops the stuck "
        f"processes and succeeds) (default {DEFAULT_EXIT_TIMEOUT:.0f})",
    )
    grace_period: float = option(
        DEFAULT_GRACE_PERIOD,
        check=validate_grace_period,
        parse=float,
        metavar="SECONDS",
        help=f"on cancel, seconds between SIGTERM and SIGKILL (default {DEFAULT_GRACE_PERIOD:.0f}, "
        f"at most {MAX_GRACE_PERIOD:.0f})",
    )
    monitor_interval: float = option(
        DEFAULT_MONITOR_INTERVAL,
        check=validate_monitor_interval,
        parse=float,
        metavar="SECONDS",
        help="seconds between resource samples of each rank (CPU, memory, GPU); 0 turns them off "
        f"(default {DEFAULT_MONITOR_INTERVAL:.0f})",
    )
