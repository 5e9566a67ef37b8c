"""The checkpoint model (README "Checkpoints"): what a checkpoint is, how a job's checkpoints
stand in order and which is the newest complete one, how its runs' declarations are read, and
what a reference to one names.

- A checkpoint (``Found``) is one file, or one directory of files saved together, with its step
  and whether it is complete: every file in and none written in the last ``SETTLE_SECONDS``
  (``ckptscan`` recognises the formats on disk and makes them).
- A job's checkpoints are those in its checkpoint dir and at the paths its runs declared
  (``run.checkpoint(path, step=...)``), a declared step over the one a name says
  (``ckptscan.scan_job`` gathers them, within one budget of directory entries).
- They stand in ``order``: by step, then the time their last file was written, then the path;
  one that says no step stands before every stepped one. The newest complete one is the last
  complete one in that order (``newest_complete``): a restarted rank resumes from it
  (``restarts.py``), ``--resume JOB`` (``latest``) and ``POST jobs/<id>/resume`` take it, the
  listing marks it ``latest``, and ``--keep-checkpoints N`` keeps it and the N-1 before it
  (``retention.py``).
- A run's declarations (``runs/<run>/checkpoints.jsonl``) are read here alone, with one bound:
  the newest ``MAX_DECLARED`` lines of the file's last ``MAX_DECLARED_BYTES``, of the job's newest
  ``MAX_RUNS`` runs (``declarations``).
- A reference (``latest``, a step, a checkpoint's id: a hash of its path, ``checkpoint_id``)
  names one checkpoint of a job's list, or says why none (``find``).

Standard library only: the rank wrapper and the Kubernetes pod wrapper (which gets the runtime
shipped with the job) resume a restarted rank with it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from . import contract
from .regularfile import fd_beneath

# A file written to within this many seconds may still be growing: not complete yet.
SETTLE_SECONDS = 2.0
SCAN_LIMIT = 20_000  # directory entries a job's checkpoints are looked for in (dir and declared)
MAX_RUNS = 1000  # runs of a job whose declarations are read (the newest)
MAX_DECLARED_BYTES = 1 << 20  # of each run's checkpoints.jsonl: the newest part
MAX_DECLARED = 1000  # declared paths of a run (the newest)
LATEST = "latest"
_RUN_NAME = re.compile(contract.RUN_NAME_PATTERN)


@dataclass(frozen=True)
class Found:
    """A checkpoint: a file, or a directory of files saved together."""

    path: str  # absolute
    kind: str  # "torch" | "lightning" | "deepspeed" | "dcp" | "files"
    step: int | None
    epoch: int | None
    step_source: str | None  # "name" | "metadata" | "declared" | "em" | None
    mtime: float  # when its last file was written
    size: int  # bytes; a directory's files summed
    complete: bool
    world_size: int | None  # DeepSpeed ZeRO: the number of optimizer shards


class Budget:
    """Directory entries a scan may still look at: one budget can bound a whole listing (the
    checkpoint dir and every declared path); ``hit`` says entries were left out for want of it."""

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.hit = False


def with_step(found: Found, step: int, source: str) -> Found:
    """``found`` with a step learnt elsewhere (a declaration, the run's logged steps)."""
    return replace(found, step=step, step_source=source)


def order(found: Found) -> tuple[int, float, str]:
    """Where a checkpoint stands among a job's: by step (none first), then time, then path."""
    return (-1 if found.step is None else found.step, found.mtime, found.path)


def newest_complete(found: Iterable[Found]) -> Found | None:
    """The newest complete checkpoint (None when none is complete): the one every reader takes."""
    return max((f for f in found if f.complete), key=order, default=None)


# -- what the job's runs declared ----------------------------------------------------------


@dataclass(frozen=True)
class Declared:
    """A checkpoint a run declared: the run, and the step it said (None: none)."""

    run: str
    step: int | None


def run_names(job_dir: str) -> list[str]:
    """The job's runs: directories of ``runs/`` with a valid name (no links), newest last (by
    the time they changed), at most ``MAX_RUNS``."""
    runs = os.path.join(job_dir, contract.RUNS_DIR)
    found = []
    try:
        if not stat.S_ISDIR(os.lstat(runs).st_mode):
            return []
        with os.scandir(runs) as entries:
            for e in entries:
                if _RUN_NAME.fullmatch(e.name) and e.is_dir(follow_symlinks=False):
                    found.append((e.stat(follow_symlinks=False).st_mtime, e.name))
    except OSError:  # no runs yet
        return []
    return [name for _, name in sorted(found)[-MAX_RUNS:]]


def declared(job_dir: str, run: str) -> dict[str, Declared]:
    """The absolute paths run ``run`` declared, each with its step (a later line wins): the
    newest ``MAX_DECLARED`` lines of the file's last ``MAX_DECLARED_BYTES``. Read without
    following a link out of the job dir, nor waiting on a FIFO; nothing when it cannot be read."""
    try:
        fd = fd_beneath(job_dir, [contract.RUNS_DIR, run, contract.CHECKPOINTS_FILE], os.O_RDONLY)
    except (OSError, ValueError):
        return {}
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - MAX_DECLARED_BYTES))
        lines = f.read(MAX_DECLARED_BYTES).split(b"\n")[:-1]  # the last one may be half-written
    out: dict[str, Declared] = {}
    for line in lines[-MAX_DECLARED:]:
        try:
            data = json.loads(line)
            path, step = data["path"], data.get("step")
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(path, str) and os.path.isabs(path):
            good_step = isinstance(step, int) and not isinstance(step, bool)
            out[os.path.normpath(path)] = Declared(run, step if good_step else None)
    return out


def declarations(job_dir: str) -> dict[str, Declared]:
    """Every path the job's runs declared (``run_names``' order: a newer run's word wins)."""
    return {path: d for run in run_names(job_dir) for path, d in declared(job_dir, run).items()}


# -- what a reference names ------------------------------------------------------------------


def checkpoint_id(job_dir: str, path: str) -> str:
    """``c`` and 12 hex digits of a hash of the path (relative to the job dir when inside it)."""
    prefix = f"{job_dir}{os.sep}"
    key = path[len(prefix) :] if path.startswith(prefix) else path
    return "c" + hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:12]


class Listed(Protocol):
    """A checkpoint as a job's list shows it (its payload): what a reference is matched on."""

    @property
    def id(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def step(self) -> int | None: ...
    @property
    def complete(self) -> bool: ...


C = TypeVar("C", bound=Listed)


class NoSuchCheckpoint(LookupError):
    """A reference names no checkpoint the job can resume from; the message says what to do."""


def find(job: str, listed: Sequence[C], which: str, latest: str | None) -> C:
    """The checkpoint ``which`` names among job ``job``'s ``listed`` ones (oldest first):
    ``latest`` is the one whose id is ``latest`` (the list's newest complete one), a step or an
    id the newest complete one that matches. ``NoSuchCheckpoint`` says why there is none."""
    if not listed:
        raise NoSuchCheckpoint(
            f"job {job} has no checkpoints: its script saves none in $DISTTRAIN_CHECKPOINT_DIR "
            "and declares none with run.checkpoint(path)"
        )
    if which == LATEST:
        newest = next((c for c in listed if c.id == latest), None) if latest is not None else None
        if newest is None:
            raise NoSuchCheckpoint(
                f"job {job} has no complete checkpoint yet ({len(listed)} being written): try again shortly"
            )
        return newest
    return _named(job, listed, which)


def _named(job: str, listed: Sequence[C], which: str) -> C:
    """The newest complete checkpoint of step or id ``which``."""
    step = int(which) if which.isdigit() else None
    named = [c for c in listed if c.id == which or (step is not None and c.step == step)]
    if not named:
        steps = sorted({c.step for c in listed if c.step is not None})
        raise NoSuchCheckpoint(
            f"job {job} has no checkpoint {'at step ' if step is not None else ''}{which}: "
            f"its steps are {', '.join(map(str, steps)) or 'unknown'} (or resume from latest)"
        )
    whole = [c for c in named if c.complete]
    if not whole:
        steps = sorted({c.step for c in listed if c.complete and c.step is not None})
        raise NoSuchCheckpoint(
            f"checkpoint {named[-1].path} of job {job} is incomplete (still being written, or cut off): "
            f"resume from latest or another step of {steps}"
        )
    return whole[-1]
