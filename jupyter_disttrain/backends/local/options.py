"""The local backend's options (``spec.options``), declared once and checked before anything runs.

The flags of ``%%distrun`` and ``jupyter disttrain run`` are generated from the fields of
``LocalOptions`` (their help and defaults); the base backend checks ``spec.options`` against them
(``backends/resolve.py``: each field's ``check``) and hands the typed object to the hooks,
refusing a bad value or an option of another backend with a one-line error. The backend
registry loads this module without the backend (``backends.options_class``), so the magic's
flags cost no more than it. The supervisor's options and ``--cold``, which Slurm's share,
come from ``backends/agents/options.py`` and ``backends/warm/options.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...model.flags import group_access_option, option
from ..agents.options import validate_switch
from ..warm.options import WarmOptions
from .python import validate_python


def _python(value: object, field: str) -> str:
    validate_python(value)
    return str(value)


@dataclass(frozen=True)
class LocalOptions(WarmOptions):
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
    group_access: bool = group_access_option(check=validate_switch)
