"""A job's checkpoints and resuming from one: the job layer's part (README "Checkpoints").

``JobCheckpoints`` is ``JobManager``'s checkpoint half, made by the manager over its store and
its runs reader: the list (``CheckpointIndex`` over the checkpoint model), the usage a job's
details show, the pins that keep a checkpoint a job resumed from, the load cell and what may be
downloaded. ``choose`` is the one place a reference (``latest``, a step, an id) becomes the
checkpoint a new job starts from: the job's list is read once and the reference resolved once by
the model (``runtime/checkpoints.find``), and the answer travels as a ``Chosen`` (the listed
checkpoint, and the ``ResumedFrom`` the new spec records; its path is the ranks'
``DISTTRAIN_RESUME_FROM``). ``--resume JOB_ID[:STEP|latest|ID]`` (the magic, the CLI, the
Python API) is chosen at submit (``resolve``); ``POST jobs/<id>/resume`` chooses before it
submits and hands the ``Chosen`` on, so the job is launched with what the answer names.
Whatever is wrong (no such job, step or checkpoint; one still being written; a DeepSpeed ZeRO
checkpoint of another world size) is one line saying what to do, and nothing is launched.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..model.errors import DistTrainError, InvalidSpecError, UnknownCheckpointError, UnknownJobError
from ..model.specs import LATEST, JobSpec, JobStatus, ResumedFrom, parse_resume
from ..packaging.loadcell import load_cell
from ..payloads.checkpoints import Checkpoint, CheckpointCode, CheckpointList, CheckpointUsage
from ..runtime import retention
from ..runtime.atomic import write_json
from ..runtime.checkpoints import SCAN_LIMIT, SETTLE_SECONDS, NoSuchCheckpoint, find
from ..runtime.contract import CHECKPOINT_PINS_FILE
from ..tracking.checkpoints import CheckpointIndex, checkpoint_dir

if TYPE_CHECKING:
    from ..storage.store import JobRecord, JobStore
    from ..tracking.runs import RunsReader

log = logging.getLogger(__name__)
_ID = re.compile(r"c[0-9a-f]{12}")
DETAIL_SCAN_LIMIT = 5_000  # directory entries a job's details look at for its checkpoints' usage
USAGE_SECONDS = 5.0  # a job's details wait this long for its checkpoints' usage
USAGE_THREADS = 2
_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class Chosen:
    """The checkpoint a new job starts from, chosen once: as the job's list shows it (a REST
    resume answers with it), and as the new job's spec records it (``spec.resumed_from``)."""

    listed: Checkpoint
    resumed_from: ResumedFrom

    @property
    def reference(self) -> str:
        """``JOB_ID:CHECKPOINT_ID``: what the new spec's ``resume`` says it was asked."""
        return f"{self.resumed_from.job}:{self.resumed_from.checkpoint}"


class JobCheckpoints:
    """A job's checkpoints for the job layer (the manager makes one, over its store and runs)."""

    def __init__(
        self, store: JobStore, runs: RunsReader, status_of: Callable[[JobRecord], JobStatus]
    ) -> None:
        self.store = store
        self.index = CheckpointIndex(runs)  # remembers how far it read each run's metrics
        self._status_of = status_of  # a job's stored status (its backend need not load here)

    def listing(self, job_id: str, limit: int = SCAN_LIMIT) -> CheckpointList:
        """The job's checkpoints; at most ``limit`` directory entries are looked at (its
        checkpoint dir and the paths its runs declared together: ``usage.more`` says when there
        were more)."""
        job_dir = self.store.existing_dir(job_id)
        record = self.store.read_record(job_id)
        spec = record.spec
        pinned = retention.pinned(str(job_dir))
        # An ended job writes nothing more: its newest file is complete now, not 2 s from now (what
        # `latest` resumes from right after the end). The stored status says so without asking the
        # backend (which may not load here); a stale one only keeps the 2 s.
        settle = 0.0 if self._status_of(record).is_terminal else SETTLE_SECONDS
        checkpoints, usage = self.index.index(
            job_dir, pinned=pinned, keep=spec.keep_checkpoints, settle=settle, limit=limit
        )
        return CheckpointList(job_id, str(checkpoint_dir(job_dir)), checkpoints, usage, spec.resumed_from)

    def usage(self, job_id: str) -> CheckpointUsage | None:
        """The disk the job's checkpoints use, for its details (None where they cannot be read).

        Bounded twice, as every poll of a job's details pays it: a smaller entry budget than a
        listing's, and ``USAGE_SECONDS`` of waiting (a scan stuck on a hung file system stays in
        the index's own threads; the details answer without it)."""
        future = _usage_pool().submit(self.listing, job_id, DETAIL_SCAN_LIMIT)
        try:
            return future.result(timeout=USAGE_SECONDS).usage
        except concurrent.futures.TimeoutError:
            log.warning("job %s's checkpoints took over %g s to index: left out", job_id, USAGE_SECONDS)
        except (OSError, DistTrainError) as exc:  # a detail, not the job: never fail it
            log.debug("could not index job %s's checkpoints: %s", job_id, exc)
        return None

    # -- resuming ------------------------------------------------------------------------------
    def resolve(self, spec: JobSpec) -> JobSpec:
        """``spec`` with ``resumed_from`` chosen from ``resume`` (cleared when there is none: a
        client's JSON cannot name a checkpoint path of its own)."""
        if spec.resume is None:
            return spec if spec.resumed_from is None else dataclasses.replace(spec, resumed_from=None)
        job_id, which = parse_resume(spec.resume)
        try:
            chosen = self.choose(job_id, which, spec.world_size, spec.resume)
        except UnknownJobError:
            raise InvalidSpecError(
                f"--resume {spec.resume}: there is no job {job_id} (list the jobs with %distrun list)"
            ) from None
        return dataclasses.replace(spec, resumed_from=chosen.resumed_from)

    def choose(self, job_id: str, which: str, world_size: int, asked: str | None = None) -> Chosen:
        """The checkpoint ``which`` (``latest``, a step or an id) of job ``job_id`` that a job of
        ``world_size`` ranks can start from: its list read once, the reference resolved once.
        ``asked``: the ``--resume`` words, for the messages (else the checkpoint chosen)."""
        listing = self.listing(job_id)
        try:
            found = find(job_id, listing.checkpoints, which, listing.usage.latest)
        except NoSuchCheckpoint as exc:
            raise InvalidSpecError(str(exc)) from None
        if found.kind == "deepspeed" and found.world_size and found.world_size != world_size:
            raise InvalidSpecError(
                f"--resume {asked or f'{job_id}:{found.id}'}: this DeepSpeed ZeRO checkpoint was written "
                f"by {found.world_size} ranks, the new job has {world_size}: use the same --gpus/--nodes, "
                "or convert it with DeepSpeed's universal checkpoint (ds_to_universal) first"
            )
        resumed = ResumedFrom(
            job=job_id,
            checkpoint=found.id,
            step=found.step,
            kind=found.kind,
            path=found.path,
            job_dir=str(self.store.job_dir(job_id)),
        )
        return Chosen(found, resumed)

    def pin(self, spec: JobSpec, job_id: str) -> None:
        """Record in the resumed job's dir that job ``job_id`` (accepted by its backend) resumes
        from its checkpoint (retention and the list read it: a pinned checkpoint is never deleted)."""
        resumed = spec.resumed_from
        if resumed is None:
            return
        try:
            _set_pin(self.store.existing_dir(resumed.job), job_id, resumed.path)
        except (
            OSError,
            UnknownJobError,
        ) as exc:  # another user's job dir, a full disk: resume anyway, unpinned
            log.warning(
                "could not pin %s in job %s (its --keep-checkpoints may delete it): %s",
                resumed.path,
                resumed.job,
                exc,
            )

    def unpin(self, record: JobRecord) -> None:
        """Drop the pin job ``record`` holds on the checkpoint it resumed from (it is being purged)."""
        resumed = record.spec.resumed_from
        if resumed is None:
            return
        try:
            _set_pin(self.store.existing_dir(resumed.job), record.id, None)
        except (OSError, UnknownJobError) as exc:  # that job is gone, or not ours to write
            log.debug("could not unpin %s in job %s: %s", resumed.path, resumed.job, exc)

    # -- one checkpoint ------------------------------------------------------------------------
    def checkpoint(self, job_id: str, checkpoint: str) -> Checkpoint:
        """The job's checkpoint with the id ``checkpoint``."""
        for found in self.listing(job_id).checkpoints:
            if found.id == checkpoint:
                return found
        raise UnknownCheckpointError(
            f"job {job_id} has no checkpoint {checkpoint!r} "
            f"(see GET .../jobs/{job_id}/checkpoints for the ids)"
        )

    def downloadable(self, job_id: str, checkpoint: str) -> Checkpoint:
        """The checkpoint, if it is inside the job's directory (one declared elsewhere is not
        served: no path leaves the job dir)."""
        found = self.checkpoint(job_id, checkpoint)
        job_dir = os.path.realpath(self.store.job_dir(job_id))
        if os.path.commonpath([job_dir, os.path.realpath(found.path)]) != job_dir:
            raise InvalidSpecError(
                f"checkpoint {checkpoint} ({found.path}) is outside the job's directory: copy it from there"
            )
        return found

    def load_code(self, job_id: str, checkpoint: str) -> CheckpointCode:
        """A notebook cell that loads the checkpoint with the model class the job's script defined."""
        found = self.checkpoint(job_id, checkpoint)
        cell = load_cell(self.store.read_script(job_id), found.kind, found.path)
        return CheckpointCode(job_id, found.id, cell.code, cell.model_class, cell.note)


def which_of(value: object) -> str:
    """The ``checkpoint`` of a resume request: ``latest``, a step or a checkpoint's id."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    if isinstance(value, str) and (value == LATEST or value.isdigit() or _ID.fullmatch(value)):
        return value
    raise InvalidSpecError(
        f"checkpoint must be 'latest', a step (e.g. 1200) or a checkpoint's id from the list, not {value!r}"
    )


def _set_pin(job_dir: Path, holder: str, path: str | None) -> None:
    """Pin ``path`` for the job ``holder`` in the pins file of ``job_dir`` (None: drop its pin).
    Paths pinned before pins named their job stay pinned."""
    paths, by = retention.pins(str(job_dir))
    unnamed = paths - set(by.values())
    if path is None and holder not in by:
        return
    if path is None:
        del by[holder]
    else:
        by[holder] = path
    write_json(
        job_dir / CHECKPOINT_PINS_FILE,
        {"paths": sorted(unnamed | set(by.values())), "by": dict(sorted(by.items()))},
    )


def _usage_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(USAGE_THREADS, thread_name_prefix="disttrain-ckpt")
        return _POOL
