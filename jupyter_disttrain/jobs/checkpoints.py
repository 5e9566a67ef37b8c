"""A job's checkpoints and resuming from one: the job layer's part (README "Checkpoints").

``resolve`` is the one place ``--resume JOB_ID[:STEP|latest|ID]`` becomes the spec's
``resumed_from`` (the checkpoint's path is the ranks' ``DISTTRAIN_RESUME_FROM``): the magic,
the CLI and ``POST jobs/<id>/resume`` all submit through ``JobManager.submit``, which calls it.
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
from pathlib import Path
from typing import TYPE_CHECKING

from ..model.errors import DistTrainError, InvalidSpecError, UnknownCheckpointError, UnknownJobError
from ..model.specs import LATEST, JobSpec, ResumedFrom, parse_resume
from ..packaging.loadcell import load_cell
from ..packaging.origins import ORIGINS_FILE
from ..packaging.values import ARRAY_FILE, TENSOR_FILE
from ..payloads import (
    Checkpoint,
    CheckpointCode,
    CheckpointList,
    CheckpointUsage,
    JobSummary,
    ResumeAnswer,
    SubmitAnswer,
)
from ..runtime import ckptscan, retention
from ..runtime.atomic import write_json
from ..runtime.contract import CHECKPOINT_PINS_FILE
from ..storage.safefiles import is_real_file, open_regular
from ..tracking.checkpoints import SCAN_LIMIT, checkpoint_dir

if TYPE_CHECKING:
    from ..storage.store import JobRecord, JobStore
    from .manager import JobManager

log = logging.getLogger(__name__)
SIDE_FILES = (TENSOR_FILE, ARRAY_FILE, ORIGINS_FILE)  # what packaging ships beside the script
_ID = re.compile(r"c[0-9a-f]{12}")
DETAIL_SCAN_LIMIT = 5_000  # directory entries a job's details look at for its checkpoints' usage
USAGE_SECONDS = 5.0  # a job's details wait this long for its checkpoints' usage
USAGE_THREADS = 2
_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def pin(store: JobStore, spec: JobSpec, job_id: str) -> None:
    """Record in the resumed job's dir that job ``job_id`` (accepted by its backend) resumes from
    its checkpoint (retention and the list read it: a pinned checkpoint is never deleted)."""
    resumed = spec.resumed_from
    if resumed is None:
        return
    try:
        _set_pin(store.existing_dir(resumed.job), job_id, resumed.path)
    except (OSError, UnknownJobError) as exc:  # another user's job dir, a full disk: resume anyway, unpinned
        log.warning(
            "could not pin %s in job %s (its --keep-checkpoints may delete it): %s",
            resumed.path,
            resumed.job,
            exc,
        )


def unpin(store: JobStore, record: JobRecord) -> None:
    """Drop the pin job ``record`` holds on the checkpoint it resumed from (it is being purged)."""
    resumed = record.spec.resumed_from
    if resumed is None:
        return
    try:
        _set_pin(store.existing_dir(resumed.job), record.id, None)
    except (OSError, UnknownJobError) as exc:  # that job is gone, or not ours to write
        log.debug("could not unpin %s in job %s: %s", resumed.path, resumed.job, exc)


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


def checkpoint_list(manager: JobManager, job_id: str, limit: int = SCAN_LIMIT) -> CheckpointList:
    """The job's checkpoints; at most ``limit`` directory entries are looked at (its checkpoint
    dir and the paths its runs declared together: ``usage.more`` says when there were more)."""
    job_dir = manager.store.existing_dir(job_id)
    record = manager.store.read_record(job_id)
    spec = record.spec
    pinned = retention.pinned(str(job_dir))
    # An ended job writes nothing more: its newest file is complete now, not 2 s from now (what
    # `latest` resumes from right after the end). The stored status says so without asking the
    # backend (which may not load here); a stale one only keeps the 2 s.
    ended = manager.stored_status(record).is_terminal
    settle = 0.0 if ended else ckptscan.SETTLE_SECONDS
    checkpoints, usage = manager.checkpoint_index.index(
        job_dir, pinned=pinned, keep=spec.keep_checkpoints, settle=settle, limit=limit
    )
    return CheckpointList(job_id, str(checkpoint_dir(job_dir)), checkpoints, usage, spec.resumed_from)


def usage_of(manager: JobManager, job_id: str) -> CheckpointUsage | None:
    """The disk the job's checkpoints use, for its details (None where they cannot be read).

    Bounded twice, as every poll of a job's details pays it: a smaller entry budget than a
    listing's, and ``USAGE_SECONDS`` of waiting (a scan stuck on a hung file system stays in
    the index's own threads; the details answer without it)."""
    future = _usage_pool().submit(checkpoint_list, manager, job_id, DETAIL_SCAN_LIMIT)
    try:
        return future.result(timeout=USAGE_SECONDS).usage
    except concurrent.futures.TimeoutError:
        log.warning("job %s's checkpoints took over %g s to index: left out", job_id, USAGE_SECONDS)
    except (OSError, DistTrainError) as exc:  # a detail, not the job: never fail it
        log.debug("could not index job %s's checkpoints: %s", job_id, exc)
    return None


def _usage_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(USAGE_THREADS, thread_name_prefix="disttrain-ckpt")
        return _POOL


def which_of(value: object) -> str:
    """The ``checkpoint`` of a resume request: ``latest``, a step or a checkpoint's id."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    if isinstance(value, str) and (value == LATEST or value.isdigit() or _ID.fullmatch(value)):
        return value
    raise InvalidSpecError(
        f"checkpoint must be 'latest', a step (e.g. 1200) or a checkpoint's id from the list, not {value!r}"
    )


def find(listing: CheckpointList, which: str) -> Checkpoint:
    """The checkpoint ``which`` names in ``listing`` (``latest``: the newest complete one)."""
    job, every = listing.job_id, listing.checkpoints
    complete = [c for c in every if c.complete]
    if not every:
        raise InvalidSpecError(
            f"job {job} has no checkpoints: its script saves none in $DISTTRAIN_CHECKPOINT_DIR "
            "and declares none with run.checkpoint(path)"
        )
    if which == LATEST:
        if not complete:
            raise InvalidSpecError(
                f"job {job} has no complete checkpoint yet ({len(every)} being written): try again shortly"
            )
        return complete[-1]
    named = [c for c in every if c.id == which or (which.isdigit() and c.step == int(which))]
    if not named:
        steps = sorted({c.step for c in every if c.step is not None})
        raise InvalidSpecError(
            f"job {job} has no checkpoint {'at step ' if which.isdigit() else ''}{which}: "
            f"its steps are {', '.join(map(str, steps)) or 'unknown'} (or resume from latest)"
        )
    whole = [c for c in named if c.complete]
    if not whole:
        steps = sorted({c.step for c in complete if c.step is not None})
        raise InvalidSpecError(
            f"checkpoint {named[-1].path} of job {job} is incomplete (still being written, or cut off): "
            f"resume from latest or another step of {steps}"
        )
    return whole[-1]


def resolve(manager: JobManager, spec: JobSpec) -> JobSpec:
    """``spec`` with ``resumed_from`` resolved from ``resume`` (cleared when there is none)."""
    if spec.resume is None:
        return spec if spec.resumed_from is None else dataclasses.replace(spec, resumed_from=None)
    job_id, which = parse_resume(spec.resume)
    try:
        listing = checkpoint_list(manager, job_id)
    except UnknownJobError:
        raise InvalidSpecError(
            f"--resume {spec.resume}: there is no job {job_id} (list the jobs with %distrun list)"
        ) from None
    found = find(listing, which)
    if found.kind == "deepspeed" and found.world_size and found.world_size != spec.world_size:
        raise InvalidSpecError(
            f"--resume {spec.resume}: this DeepSpeed ZeRO checkpoint was written by {found.world_size} "
            f"ranks, the new job has {spec.world_size}: use the same --gpus/--nodes, or convert it "
            "with DeepSpeed's universal checkpoint (ds_to_universal) first"
        )
    resumed = ResumedFrom(
        job=job_id,
        checkpoint=found.id,
        step=found.step,
        kind=found.kind,
        path=found.path,
        job_dir=str(manager.store.job_dir(job_id)),
    )
    return dataclasses.replace(spec, resumed_from=resumed)


def resubmit_job(manager: JobManager, job_id: str, resume: str | None = None) -> SubmitAnswer:
    """Submit job ``job_id``'s own spec, script and packaged values again: from the start, or
    from the checkpoint ``resume`` (``"<job>:<which>"``, as ``--resume`` takes it)."""
    record = manager.store.read_record(job_id)
    script = manager.store.read_script(job_id)
    spec = dataclasses.replace(record.spec, resume=resume, resumed_from=None)
    new_id = manager.submit(spec, script, _side_files(manager.store, job_id))
    try:  # launched: whatever fails now is no fault of the request
        new = manager.store.read_record(new_id)
        return SubmitAnswer(new_id, JobSummary.of(new, manager.stored_status(new)))
    except (OSError, DistTrainError) as exc:
        raise DistTrainError(f"job {new_id} was launched, but its record could not be read: {exc}") from exc


def resume_job(manager: JobManager, job_id: str, which: str) -> ResumeAnswer:
    """Submit job ``job_id``'s own spec and script again, from its checkpoint ``which``.

    ``which`` is chosen once, before the launch, and submitted by its id: the answer names the
    checkpoint the new job got (``spec.resumed_from``), with nothing listed again after the launch
    (a checkpoint deleted meanwhile would turn a launched job into a "no checkpoint" error)."""
    chosen = find(checkpoint_list(manager, job_id), which)
    new = resubmit_job(manager, job_id, f"{job_id}:{chosen.id}")
    return ResumeAnswer(new.id, new.job, chosen)


def _side_files(store: JobStore, job_id: str) -> dict[str, bytes]:
    """The values and origins the job was packaged with (read as they are: links refused)."""
    out = {}
    job_dir = store.job_dir(job_id)
    for name in SIDE_FILES:
        if is_real_file(job_dir / name):
            with open_regular(job_dir / name) as f:
                out[name] = f.read()
    return out


def checkpoint_of(manager: JobManager, job_id: str, checkpoint: str) -> Checkpoint:
    """The job's checkpoint with the id ``checkpoint``."""
    for found in checkpoint_list(manager, job_id).checkpoints:
        if found.id == checkpoint:
            return found
    raise UnknownCheckpointError(
        f"job {job_id} has no checkpoint {checkpoint!r} (see GET .../jobs/{job_id}/checkpoints for the ids)"
    )


def downloadable(manager: JobManager, job_id: str, checkpoint: str) -> Checkpoint:
    """The checkpoint, if it is inside the job's directory (one declared elsewhere is not served:
    no path leaves the job dir)."""
    found = checkpoint_of(manager, job_id, checkpoint)
    job_dir = os.path.realpath(manager.store.job_dir(job_id))
    if os.path.commonpath([job_dir, os.path.realpath(found.path)]) != job_dir:
        raise InvalidSpecError(
            f"checkpoint {checkpoint} ({found.path}) is outside the job's directory: copy it from there"
        )
    return found


def load_code(manager: JobManager, job_id: str, checkpoint: str) -> CheckpointCode:
    """A notebook cell that loads the checkpoint with the model class the job's script defined."""
    found = checkpoint_of(manager, job_id, checkpoint)
    cell = load_cell(manager.store.read_script(job_id), found.kind, found.path)
    return CheckpointCode(job_id, found.id, cell.code, cell.model_class, cell.note)
