"""What a launcher is: it turns a ``JobSpec`` into the job's roles, which every backend runs.

A role is a kind of process of the job (``worker`` for torchrun and DeepSpeed jobs;
``scheduler``, ``server`` and ``worker`` for a parameter-server job), with its replica count,
the script's arguments and the environment its processes add to the rank environment
(``launch.rank_env``). How a backend starts a role's replicas depends on ``via``:

- ``torchrun``: the replicas are torch ranks; one torchrun agent per node starts
  ``nproc_per_node`` of them (a local process or a pod per node). They are named ``rank-<N>``
  after their global rank, as torchrun jobs always were.
- ``process``: one process (or pod) per replica, named ``<role>-<index>`` (a role that is
  always one process, a parameter server's ``scheduler``, is named after the role alone).
- ``horovodrun``: torch ranks too (``rank-<N>``), started by Horovod's ``horovodrun`` (on this
  machine; in a cluster Horovod's ranks are torchrun's, which run its ``entry`` program).

Launchers are pure translation, like the backends' dry runs: no process starts here, no heavy
import (DeepSpeed itself is looked up, never imported).
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..model.errors import InvalidSpecError
from ..model.specs import JobSpec
from ..runtime import contract

TORCHRUN = "torchrun"
PROCESS = "process"
HOROVODRUN = "horovodrun"
RANKED = (TORCHRUN, HOROVODRUN)  # replicas that are torch ranks, named rank-N
# Roles that serve the workers and train nothing: no GPU, and never the job's "rank 0".
HELPER_ROLES = ("scheduler", "server")


@dataclass(frozen=True)
class Role:
    """One kind of process of a job, as a backend runs it."""

    name: str
    replicas: int
    args: list[str] = field(default_factory=list)  # the script's arguments
    env: dict[str, str] = field(default_factory=dict)  # on top of the rank environment
    via: str = TORCHRUN  # TORCHRUN: ranks started by one agent per node; PROCESS: one per replica
    single: bool = False  # always one replica, named after the role (``scheduler``)
    # The file torchrun runs instead of the script (Horovod's entry program in a pod); the
    # script's path then goes first in ``args``. None: torchrun runs the script itself.
    entry: str | None = None

    def replica_names(self, first_rank: int = 0) -> list[str]:
        """The names of this role's replicas (``rank-N`` for torch ranks, ``<role>-<i>`` else)."""
        if self.via in RANKED:
            return [contract.rank_name(first_rank + i) for i in range(self.replicas)]
        if self.single:
            return [self.name]
        return [f"{self.name}-{i}" for i in range(self.replicas)]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Role:
        return cls(
            name=str(data["name"]),
            replicas=int(data["replicas"]),
            args=[str(a) for a in data.get("args", [])],
            env={str(k): str(v) for k, v in data.get("env", {}).items()},
            via=str(data.get("via", TORCHRUN)),
            single=bool(data.get("single", False)),
            entry=str(data["entry"]) if data.get("entry") else None,
        )


def replicas_of(roles: list[Role]) -> list[tuple[str, str, int]]:
    """(name, role, index) of every replica of ``roles``, in order; a torch rank's index is its rank."""
    out = []
    for role in roles:
        out += [(name, role.name, i) for i, name in enumerate(role.replica_names())]
    return out


def process_replicas(roles: list[Role]) -> set[str]:
    """Replicas that are processes of their own (a parameter-server job's scheduler, servers and
    workers): their whole log is the script's output, as a rank's is (an agent's is not)."""
    return {name for name, _, _ in replicas_of([r for r in roles if r.via == PROCESS])}


def recorded_roles(spec: JobSpec, roles: Sequence[dict[str, Any]]) -> list[Role]:
    """The roles a dry run laid out (its request's ``roles``), or torchrun's workers for a job
    recorded before requests carried roles."""
    return [Role.from_json(r) for r in roles] or default_roles(spec)


def default_roles(spec: JobSpec) -> list[Role]:
    """torchrun's one role, ``worker``, its ranks running the script with the spec's arguments:
    the torchrun launcher's roles, and those of a job recorded before jobs had roles."""
    return [Role("worker", spec.world_size, list(spec.args))]


@dataclass(frozen=True)
class LaunchContext:
    """Where the job's processes run, as a backend sees it."""

    job_dir: str  # the job dir as the processes see it (a pod's may differ from the notebook's)
    cpu: bool  # no GPU: CPU processes with gloo
    cache_dir: str | None = None  # a per-user cache that outlives jobs (compiled ops...)
    # Where a job's processes find the one the others meet at (a parameter server's scheduler):
    # this machine's loopback and a free port locally; a Service's name in a cluster.
    host: str = "127.0.0.1"
    port: int = 0
    loopback: bool = True  # every process on this machine: nothing may listen beyond loopback


class Launcher(abc.ABC):
    """Turns a spec into roles. Subclasses declare their flags in ``options`` (a dataclass of
    ``flags.option`` fields; values land in ``spec.launcher_options``)."""

    #: The name users pass to ``--launcher``.
    name: ClassVar[str]
    #: The dataclass declaring this launcher's flags, or None.
    options: ClassVar[type | None] = None

    def validate(self, spec: JobSpec, *, local: bool) -> None:
        """Raise ``InvalidSpecError`` if ``spec`` cannot run with this launcher. ``local``: on
        this machine (so what the launcher needs must be importable here)."""
        known = {f.name for f in dataclasses.fields(self.options)} if self.options else set()
        unknown = sorted(set(spec.launcher_options) - known)
        if unknown:
            raise InvalidSpecError(f"the {self.name} launcher has no option {unknown[0]!r}")

    @abc.abstractmethod
    def roles(self, spec: JobSpec, ctx: LaunchContext) -> list[Role]:
        """The job's roles, in the order their replicas are listed."""

    def processes(self, spec: JobSpec) -> int:
        """How many of the job's processes compute (what this machine's CPUs are counted
        against; a parameter server's scheduler and servers mostly wait for the workers)."""
        return spec.world_size

    def side_files(self, spec: JobSpec, *, local: bool) -> dict[str, bytes]:
        """Files the job dir gets besides the script (e.g. a config the script reads), by name.
        ``local``: the job runs on this machine (as for ``validate``)."""
        return {}

    def busy(self, cache_dir: str, since: float) -> str | None:
        """What the job's ranks are busy with before training (e.g. "compiling DeepSpeed ops"),
        seen in ``cache_dir`` since ``since`` (the job's start, seconds since the epoch), or None."""
        return None

    def abandon(self, cache_dir: str, since: float) -> list[str]:
        """A job that started at ``since`` ended without succeeding: undo what it left half done
        in ``cache_dir`` (a build lock that would stall every later job); what was removed."""
        return []
