"""The default launcher: one role, ``worker``, whose replicas are torchrun's ranks."""

from __future__ import annotations

from ..model.specs import JobSpec
from .base import LaunchContext, Launcher, Role, default_roles


class TorchrunLauncher(Launcher):
    """``torchrun`` on the script: ``nproc_per_node`` ranks on each of ``nodes`` nodes."""

    name = "torchrun"

    def roles(self, spec: JobSpec, ctx: LaunchContext) -> list[Role]:
        return default_roles(spec)
