"""``--launcher horovod``: Horovod scripts (``hvd.init()``) with Horovod's gloo controller.

Locally one ``horovodrun -np N --gloo`` starts the ranks on this machine: Horovod's several
nodes are reached over SSH, which a notebook's machine does not offer, so ``--nodes`` stays 1.
The ranks are torch ranks (``rank-<N>``, from ``HOROVOD_RANK``), each under our rank wrapper.

Horovod's last release (0.28.1) builds from source only; against torch 2.x it does not build
as released (its CMake asks for C++14, torch's headers need C++17; see the README). So it is
looked up here, never imported, and a job that needs it is refused when it is missing.
"""

from __future__ import annotations

import importlib.util

from ..errors import InvalidSpecError
from ..specs import JobSpec
from .base import HOROVODRUN, KUBERNETES_LATER, LaunchContext, Launcher, Role

MISSING = (
    "--launcher horovod needs horovod, which is not importable here: install a horovod built with "
    "PyTorch and gloo (0.28.1, its last release, does not build against torch 2.x: see the README)"
)


class HorovodLauncher(Launcher):
    """``horovodrun`` on one machine: ``--gpus`` ranks."""

    name = "horovod"

    def validate(self, spec: JobSpec, *, local: bool) -> None:
        super().validate(spec, local=local)
        if not local:
            raise InvalidSpecError(KUBERNETES_LATER.format(launcher=self.name))
        if spec.nodes > 1:
            raise InvalidSpecError(
                f"--launcher horovod --nodes {spec.nodes}: Horovod reaches other nodes over SSH, which "
                "a local job does not have; leave out --nodes here, or use --backend kubernetes"
            )
        if importlib.util.find_spec("horovod") is None:
            raise InvalidSpecError(MISSING)

    def roles(self, spec: JobSpec, ctx: LaunchContext) -> list[Role]:
        return [Role("worker", spec.world_size, list(spec.args), via=HOROVODRUN)]
