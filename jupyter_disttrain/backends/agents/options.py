"""The local backend's options (``spec.options``), declared once and checked before anything runs.

The flags of ``%%distrun`` and ``jupyter disttrain run`` are generated from the fields of
``LocalOptions`` (their help and defaults); ``parse_options`` checks ``spec.options`` and returns
them typed, refusing a bad value or an option of another backend with a one-line error. The
backend registry loads this module without the backend (``backends.options_class``), so the
magic's flags cost no more than it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from ...model.errors import InvalidSpecError
from ...model.flags import check_values, group_access_option, option
from ...monitoring.guard import GuardOptions
from .python import validate_python
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


def _python(value: object, field: str) -> str:
    validate_python(value)
    return str(value)


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


@dataclass(frozen=True)
class LocalOptions(SupervisorOptions):
    """The local backend's options, with their defaults."""

    oversubscribe: bool = option(
        False,
        switch=True,
        check=validate_switch,
        help="local backend: start more processes than this machine has CPUs",
    )
    python: str | None = option(
        check=_python,
        metavar="PATH",
        help="local backend: the Python interpreter that runs the job's processes (default: the "
        "kernel's), e.g. a virtual environment's bin/python that has MXNet",
    )
    cold: bool = option(
        False,
        switch=True,
        check=validate_switch,
        help="local backend: start torchrun afresh instead of forking the ranks from the warm "
        "zygote (which holds torch imported; see docs/warm-start.md)",
    )
    group_access: bool = group_access_option(check=validate_switch)


NAMES = tuple(f.name for f in fields(LocalOptions))


def parse_options(options: dict[str, Any], other: str | None = None) -> LocalOptions:
    """Check ``spec.options`` for the local backend and return them typed. ``other``: the
    backend that has an option this one does not know, named in the error."""
    unknown = sorted(set(options) - set(NAMES))
    if unknown:
        where = f"it is a {other.capitalize()} option: add --backend {other}" if other else None
        raise InvalidSpecError(
            f"the local backend has no option {unknown[0]!r}; "
            + (where or f"its options are: {', '.join(NAMES)}")
        )
    return LocalOptions(**check_values(LocalOptions, options))
