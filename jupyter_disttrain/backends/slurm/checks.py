"""What the Slurm backend checks before a job exists, and where the job will run (``Place``).

Every refusal is one line naming the flag; the answers come from the cluster (``sinfo``,
``scontrol``), asked through ``client.SlurmClient``.
"""

from __future__ import annotations

from ...model.errors import InvalidSpecError
from ...model.specs import JobSpec
from .allocation import Allocation
from .client import Partition, SlurmClient
from .options import BATCH_ONLY, CONTROL, SlurmOptions, flag, time_seconds
from .parse import parse_time
from .request import BATCH, STEP
from .script import Place


def check_paths(working_dir: str, job_root: str, python: str) -> None:
    """Refuse a path the batch script and the steps' command lines cannot hold: one with a control
    character (a newline would end a line of ``slurm/batch.sh`` and start a command)."""
    for field, path, what in (
        ("working_dir", working_dir, "the job's working dir"),
        ("job root", job_root, "the job root (where job dirs are made)"),
        ("python", python, "this kernel's Python"),
    ):
        if CONTROL.search(path):
            raise InvalidSpecError(
                f"{field}: {what} {path!r} has a control character, which a Slurm batch script cannot "
                "hold; use a directory whose name has none"
            )


def check_step(client: SlurmClient, spec: JobSpec, opts: SlurmOptions, allocation: Allocation) -> None:
    given = [flag(k) for k in BATCH_ONLY if getattr(opts, k)]
    if given:
        raise InvalidSpecError(
            f"{given[0]} shapes a new batch job; this kernel runs inside allocation {allocation.job}, "
            "where jobs run as its job steps: leave it out, or add --batch to submit a batch job"
        )
    if spec.nodes > allocation.nodes:
        raise InvalidSpecError(
            f"--nodes {spec.nodes}: allocation {allocation.job} has {allocation.nodes} node(s); "
            f"ask for a bigger one (salloc --nodes {spec.nodes}), or add --batch to submit a batch job"
        )
    if spec.accelerator == "gpu" and not client.allocation_gpus(allocation.job):
        raise InvalidSpecError(
            f"allocation {allocation.job} has no GPU: leave out --accelerator gpu to run CPU processes"
        )


def check_batch(client: SlurmClient, spec: JobSpec, opts: SlurmOptions) -> None:
    partitions = client.partitions()
    names = chosen(opts, partitions)
    if not names:
        raise InvalidSpecError(
            f"this cluster has no default partition: choose one with --partition ({listed(partitions)})"
        )
    for name in names:
        part = partitions.get(name)
        if part is None:
            raise InvalidSpecError(
                f"--partition {name}: no such partition; this cluster has {listed(partitions)}"
            )
        if spec.nodes > part.nodes:
            raise InvalidSpecError(f"--nodes {spec.nodes}: partition {name} has {part.nodes} node(s)")
        limit = parse_time(part.max_time) if part.max_time not in ("", "n/a") else None
        wanted = time_seconds(opts.time) if opts.time else None
        if limit is not None and wanted is not None and wanted > limit:
            raise InvalidSpecError(f"--time {opts.time} is over partition {name}'s limit ({part.max_time})")
        if spec.accelerator == "gpu" and not part.gpus:
            raise InvalidSpecError(
                f"partition {name} has no GPUs: leave out --accelerator gpu to run CPU processes, "
                "or choose a partition with GPUs (--partition)"
            )


def place(client: SlurmClient, spec: JobSpec, opts: SlurmOptions) -> Place:
    allocation = None if opts.batch else Allocation.here()
    if spec.accelerator == "cpu":
        gpu = False
    elif allocation is not None:
        gpu = client.allocation_gpus(allocation.job) > 0
    else:
        partitions = client.partitions()
        gpu = all(partitions[n].gpus for n in chosen(opts, partitions) if n in partitions)
    return Place(
        mode=BATCH if allocation is None else STEP,
        version=client.version(),
        gpu=gpu,
        gres=gpu and client.gres_for_gpus(),
        allocation=allocation.job if allocation else None,
    )


def chosen(opts: SlurmOptions, partitions: dict[str, Partition]) -> list[str]:
    """The partitions a batch job may run in: ``--partition``'s, else the cluster's default."""
    if opts.partition:
        return opts.partition.split(",")
    return [name for name, part in partitions.items() if part.default]


def listed(partitions: dict[str, Partition]) -> str:
    return ", ".join(sorted(partitions)) or "no partitions"
