"""The option of every backend whose jobs may fork from a warm zygote (the local one, and Slurm's
warm steps): ``--cold``, declared once. The backend registry loads the options modules that build
on it without any backend, so this module imports only the model and the supervisor's options.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...model.flags import option
from ..agents.options import SupervisorOptions, validate_switch


def cold_option() -> Any:
    """``--cold``, one flag for every backend whose jobs may run warm."""
    return option(
        False,
        switch=True,
        check=validate_switch,
        help="start torchrun afresh (local: a new process; slurm: a new job step; kubernetes: new pods, "
        "never a warm pool) instead of forking the ranks from a warm zygote, which holds torch "
        "imported (see docs/warm-start.md)",
    )


@dataclass(frozen=True)
class WarmOptions(SupervisorOptions):
    """A supervised job's options, and whether it may run warm."""

    cold: bool = cold_option()


def keep_warm_option() -> Any:
    """``--keep-warm DURATION``, one flag for every backend that keeps capacity warm (Slurm's
    warm steps, Kubernetes pools)."""
    return option(
        metavar="DURATION",
        help="slurm: inside an allocation, how long the warm steps (one srun step per node holding "
        "torch imported, which re-runs fork from) stay when idle, e.g. 20m (default: "
        "$DISTTRAIN_WARM_IDLE, else 30m; 0: end each warm step with its job); for a batch job, keep it "
        "after the job that long when idle (within its --time, holding its GPUs) for re-runs of its "
        "shape (default: off); kubernetes: keep the job's pods as a warm pool for this long when idle, "
        "re-runs of the same shape fork in them (default: $DISTTRAIN_KEEP_WARM, "
        "c.DistTrainApp.keep_warm, else off: kept GPUs cost money)",
    )
