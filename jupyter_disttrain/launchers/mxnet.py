"""``--launcher mxnet``: an MXNet parameter-server job: a scheduler, S servers and W workers.

Every process runs the same script, told its part by ps-lite's environment: ``DMLC_ROLE``,
``DMLC_PS_ROOT_URI``/``DMLC_PS_ROOT_PORT`` (where the scheduler listens), ``DMLC_NUM_SERVER``,
``DMLC_NUM_WORKER``. A scheduler or a server never reaches the training code: importing
``mxnet`` in that role serves until the workers are done, then exits. The workers' kvstore
(``mx.kv.create("dist_sync")``) pushes to the servers and pulls from them.

On this machine nothing listens beyond loopback: the scheduler binds ``DMLC_PS_ROOT_URI``
(127.0.0.1), the servers and workers ``DMLC_NODE_HOST`` (without it ps-lite takes the first
non-loopback interface). In a cluster every replica is a pod (``flavors/job.py``) and the
scheduler is reached by its DNS name behind the job's headless Service, which it cannot bind:
``DMLC_USE_KUBERNETES=1`` makes it bind its pod's addresses, and the others use their pod's own
interface.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..model.errors import InvalidSpecError
from ..model.flags import option
from ..model.specs import JobSpec
from .base import PROCESS, LaunchContext, Launcher, Role

DEFAULT_SERVERS = 1


@dataclass(frozen=True)
class MXNetOptions:
    servers: int | None = option(
        parse=int, metavar="S", help=f"mxnet launcher: parameter servers (default {DEFAULT_SERVERS})"
    )
    workers: int | None = option(
        parse=int, metavar="W", help="mxnet launcher: workers, each with --gpus GPUs (required)"
    )


class MXNetLauncher(Launcher):
    """One process (pod) per replica: ``scheduler``, ``server-<i>``, ``worker-<i>``."""

    name = "mxnet"
    options = MXNetOptions

    def validate(self, spec: JobSpec, *, local: bool) -> None:
        super().validate(spec, local=local)
        servers, workers = _sizes(spec)
        if workers is None:
            raise InvalidSpecError("--launcher mxnet needs --workers W (and --servers S, default 1)")
        for flag, value in (("--servers", servers), ("--workers", workers)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidSpecError(f"{flag} must be a whole number of at least 1, not {value!r}")
        if spec.nodes != 1:
            raise InvalidSpecError(
                "--launcher mxnet places one process per replica itself: leave out --nodes"
            )

    def processes(self, spec: JobSpec) -> int:
        return int(_sizes(spec)[1] or 0)

    def roles(self, spec: JobSpec, ctx: LaunchContext) -> list[Role]:
        servers, workers = _sizes(spec)
        shared = {
            "DMLC_PS_ROOT_URI": ctx.host,
            "DMLC_PS_ROOT_PORT": str(ctx.port),
            "DMLC_NUM_SERVER": str(servers),
            "DMLC_NUM_WORKER": str(workers),
        }
        if ctx.loopback:
            shared["DMLC_NODE_HOST"] = ctx.host
        else:
            shared["DMLC_USE_KUBERNETES"] = "1"
        args = list(spec.args)
        return [
            Role("scheduler", 1, args, {**shared, "DMLC_ROLE": "scheduler"}, via=PROCESS, single=True),
            Role("server", int(servers or 0), args, {**shared, "DMLC_ROLE": "server"}, via=PROCESS),
            Role("worker", int(workers or 0), args, {**shared, "DMLC_ROLE": "worker"}, via=PROCESS),
        ]


def _sizes(spec: JobSpec) -> tuple[Any, Any]:
    opts = spec.launcher_options
    return opts.get("servers", DEFAULT_SERVERS), opts.get("workers")
