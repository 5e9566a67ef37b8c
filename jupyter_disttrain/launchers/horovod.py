"""``--launcher horovod``: Horovod scripts (``hvd.init()``) with Horovod's gloo controller.

Locally one ``horovodrun -np N --gloo`` starts the ranks on this machine: Horovod's several
nodes are reached over SSH, which a notebook's machine does not offer, so ``--nodes`` stays 1.
The ranks are torch ranks (``rank-<N>``, from ``HOROVOD_RANK``), each under our rank wrapper.

On Kubernetes the pods run torchrun as torchrun jobs do (one per node, ``--gpus`` ranks each),
on Horovod's entry program (``horovod_entry.py``, shipped beside the script): it turns
torchrun's environment into Horovod's and serves Horovod's rendezvous from rank 0's process.
Horovod is then the image's business, not this machine's.

Horovod's last release (0.28.1) builds from source only; against torch 2.x it does not build
as released (its CMake asks for C++14, torch's headers need C++17; see the README). So it is
looked up here, never imported, and a job that needs it is refused when it is missing.
"""

from __future__ import annotations

import importlib.util
import posixpath
from pathlib import Path

from ..model.errors import InvalidSpecError
from ..model.specs import JobSpec
from . import horovod_entry
from .base import HOROVODRUN, TORCHRUN, LaunchContext, Launcher, Role

ENTRY_FILE = "horovod_entry.py"

MISSING = (
    "--launcher horovod needs horovod, which is not importable here: install a horovod built with "
    "PyTorch and gloo (0.28.1, its last release, does not build against torch 2.x: see docs/launchers.md)"
)


class HorovodLauncher(Launcher):
    """``horovodrun`` on one machine: ``--gpus`` ranks; torchrun pods on Horovod's entry program
    in a cluster."""

    name = "horovod"

    def validate(self, spec: JobSpec, *, local: bool) -> None:
        super().validate(spec, local=local)
        if not local:
            return  # horovod is the image's: nothing of it is needed here
        if spec.nodes > 1:
            raise InvalidSpecError(
                f"--launcher horovod --nodes {spec.nodes}: Horovod reaches other nodes over SSH, which "
                "a local job does not have; leave out --nodes here, or use --backend kubernetes"
            )
        if importlib.util.find_spec("horovod") is None:
            raise InvalidSpecError(MISSING)

    def roles(self, spec: JobSpec, ctx: LaunchContext) -> list[Role]:
        if ctx.loopback:
            return [Role("worker", spec.world_size, list(spec.args), via=HOROVODRUN)]
        script = posixpath.join(ctx.job_dir, spec.entrypoint)
        return [
            Role(
                "worker",
                spec.world_size,
                [script, *spec.args],
                {horovod_entry.PORT_ENV: str(horovod_entry.RENDEZVOUS_PORT)},
                via=TORCHRUN,
                entry=posixpath.join(ctx.job_dir, ENTRY_FILE),
            )
        ]

    def side_files(self, spec: JobSpec, *, local: bool) -> dict[str, bytes]:
        """The entry program, for the pods (a local job's ranks get their env from horovodrun)."""
        if local:
            return {}
        return {ENTRY_FILE: Path(horovod_entry.__file__).read_bytes()}
