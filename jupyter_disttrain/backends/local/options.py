"""The local backend's options (``spec.options``), declared once: the flags of ``%%distrun`` and
``jupyter disttrain run`` are generated from these fields, and the backend refuses any other."""

from __future__ import annotations

from dataclasses import dataclass, fields

from ...flags import option
from ...specs import EXIT_TIMEOUT_HELP, MONITOR_INTERVAL_HELP, OVERSUBSCRIBE_HELP


@dataclass(frozen=True)
class LocalOptions:
    oversubscribe: bool = option(False, switch=True, help=OVERSUBSCRIBE_HELP)
    exit_timeout: float | None = option(parse=float, metavar="SECONDS", help=EXIT_TIMEOUT_HELP)
    grace_period: float | None = option(
        parse=float,
        metavar="SECONDS",
        help="on cancel, seconds between SIGTERM and SIGKILL (default 10, at most 300)",
    )
    python: str | None = option(
        metavar="PATH",
        help="local backend: the Python interpreter that runs the job's processes (default: the "
        "kernel's), e.g. a virtual environment's bin/python that has MXNet",
    )

    monitor_interval: float | None = option(parse=float, metavar="SECONDS", help=MONITOR_INTERVAL_HELP)


NAMES = frozenset(f.name for f in fields(LocalOptions))
