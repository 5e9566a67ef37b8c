"""The option of every backend whose jobs may fork from a warm zygote (the local one, and Slurm's
warm steps): ``--cold``, declared once. The backend registry loads the options modules that build
on it without any backend, so this module imports only the model and the supervisor's options.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...model.flags import option
from ..agents.options import SupervisorOptions, validate_switch


@dataclass(frozen=True)
class WarmOptions(SupervisorOptions):
    """A supervised job's options, and whether it may run warm."""

    cold: bool = option(
        False,
        switch=True,
        check=validate_switch,
        help="local and slurm backends: start torchrun afresh (on Slurm in a new job step) instead of "
        "forking the ranks from a warm zygote, which holds torch imported (see docs/warm-start.md)",
    )
