"""A job's checkpoints, the disk they use, and a cell that loads one."""

from __future__ import annotations

from dataclasses import dataclass

from ..model.specs import ResumedFrom
from .runs import MetricValue


@dataclass
class Checkpoint:
    """One checkpoint of a job (README "Checkpoints"): found in its checkpoint dir or declared by
    ``run.checkpoint(path)``.

    ``id`` is stable (the same checkpoint keeps it across listings) and names it in the
    download, load and resume routes. ``kind`` is ``torch`` (a ``torch.save`` file),
    ``lightning`` (a ``.ckpt``), ``deepspeed`` (a tag directory of a save dir with ``latest``),
    ``dcp`` (a ``torch.distributed.checkpoint`` directory) or ``files`` (a directory of files saved
    together: ``step_300/{model,optim}.pt``, an HF Trainer ``checkpoint-300/``). ``complete`` is
    false while its files are still being written (a DCP dir without ``.metadata``, a DeepSpeed tag
    newer than ``latest``, a zip without its end record). ``step_source`` says where ``step``
    came from: ``name`` (the file name), ``metadata`` (what the file records), ``declared``
    (``run.checkpoint``), ``em`` (the step the run logged last before it was written).
    ``metrics``: the run's last value of each ``<type>/<name>`` at or before ``step``.
    ``world_size``: the ranks that wrote it where the format says (DeepSpeed ZeRO shards).
    ``pinned``: a resume points at it, so retention keeps it.
    """

    id: str
    path: str
    kind: str
    step: int | None
    epoch: int | None
    time: str | None
    size: int
    complete: bool
    metrics: dict[str, MetricValue]
    run: str | None
    declared: bool
    step_source: str | None
    world_size: int | None
    pinned: bool


@dataclass
class CheckpointUsage:
    """How many checkpoints a job has, the disk they use (bytes), what ``--keep-checkpoints``
    keeps (0: all), and the id of the newest complete one (what ``latest`` resumes from).
    ``more``: the listing stopped at its budget of directory entries, so there are more
    checkpoints (and bytes) than counted."""

    count: int
    complete: int
    bytes: int
    keep: int
    latest: str | None
    more: bool = False


@dataclass
class CheckpointList:
    """A job's checkpoints, oldest first (by step, then time), where it writes them (``dir``, its
    ``DISTTRAIN_CHECKPOINT_DIR``), their usage, and the checkpoint the job itself started from."""

    job_id: str
    dir: str
    checkpoints: list[Checkpoint]
    usage: CheckpointUsage
    resumed_from: ResumedFrom | None


@dataclass
class CheckpointCode:
    """The code of a notebook cell that loads a checkpoint in the kernel ("Load in notebook").

    ``model_class`` is the model class the job's script defined and the code rebuilds (null
    when there was none to find: the code then loads the state dict only); ``note`` says what
    the code assumes.
    """

    job_id: str
    checkpoint: str
    code: str
    model_class: str | None
    note: str | None
