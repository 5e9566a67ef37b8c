"""``--keep-checkpoints N``: keep the newest N complete checkpoints of the job's checkpoint dir,
newest as the checkpoint model orders them (``checkpoints.py``: a step the job's runs declared for
one counts, as for a restart, ``--resume JOB`` and the listing).

Rank 0's wrapper (``worker.py``: local and Slurm jobs) or the pod wrapper of rank 0's pod
(Kubernetes, whose pods run the script under torchrun without ``worker.py``) starts ``start()``:
a daemon thread that prunes every INTERVAL seconds where rank 0 writes, and once more as the
process exits. A checkpoint still being written (not complete in ``ckptscan``'s terms) is never
deleted nor counted, nor is one a resume points at (``<job dir>/checkpoint-pins.json``, written
by the job layer once a job resuming from it is accepted, its pin dropped when that job is
purged). A directory of files saved together (``step_300/{model,optim}.pt``) is one checkpoint,
kept or deleted whole. Standard library only: it runs inside the training process.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import threading
from collections.abc import Mapping

from . import checkpoints, ckptscan, contract
from .checkpoints import SETTLE_SECONDS, Declared
from .regularfile import read_head

INTERVAL = 10.0  # seconds between prunes (a scan of the dir: see bench/bench_checkpoints.py)
MAX_PINS_BYTES = 1 << 20


def pinned(job_dir: str) -> set[str]:
    """The checkpoint paths resumes point at (the job layer's pins file; empty when none)."""
    return pins(job_dir)[0]


def pins(job_dir: str) -> tuple[set[str], dict[str, str]]:
    """(every pinned path, the path each resuming job holds by its id) of the job's pins file
    ``{"paths": [...], "by": {job: path}}``; empty when there is none (or it is no regular file)."""
    try:
        data = json.loads(read_head(os.path.join(job_dir, contract.CHECKPOINT_PINS_FILE), MAX_PINS_BYTES))
    except (OSError, ValueError):
        return set(), {}
    if not isinstance(data, dict):
        return set(), {}
    paths, by = data.get("paths"), data.get("by")
    held = {k: v for k, v in by.items() if isinstance(v, str)} if isinstance(by, dict) else {}
    return ({p for p in paths if isinstance(p, str)} if isinstance(paths, list) else set()), held


def prune(
    root: str,
    keep: int,
    pins: set[str],
    *,
    settle: float = SETTLE_SECONDS,
    declared: Mapping[str, Declared] | None = None,
) -> list[str]:
    """Delete the complete checkpoints under ``root`` older than its newest ``keep`` complete ones,
    pinned ones left; the paths deleted. Older and newest are the checkpoint model's ``order``, a
    step the job's runs ``declared`` for a checkpoint counting as for every other reader (the
    newest complete one is what a restart and ``--resume JOB`` take). ``settle``: how long a file
    must be unchanged to count as written (0 once the writer has exited)."""
    if keep <= 0:
        return []
    top = os.path.join(os.path.abspath(root), "")
    inside = {path: said for path, said in (declared or {}).items() if path.startswith(top)}
    found, _ = ckptscan.scan_job(root, inside, settle=settle)
    complete = [f for f in found if f.complete]  # in the model's order
    doomed = [f.path for f in complete[:-keep] if f.path not in pins]
    for path in doomed:
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except OSError:
            continue  # gone already, or not ours to delete: the next prune tries again
    return doomed


def start(rank: int, env: Mapping[str, str] = os.environ) -> threading.Thread | None:
    """On rank 0, prune the job's checkpoint dir while this process runs and as it exits, if the
    job asked (``DISTTRAIN_KEEP_CHECKPOINTS``); None when it did not (or on another rank)."""
    if rank != 0:
        return None
    try:
        keep = int(env.get(contract.KEEP_CHECKPOINTS_ENV, "0"))
    except ValueError:
        return None
    root, job_dir = env.get(contract.CHECKPOINT_DIR_ENV), env.get(contract.JOB_DIR_ENV)
    if keep <= 0 or not root or not job_dir:
        return None
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(INTERVAL):
            prune(root, keep, pinned(job_dir), declared=checkpoints.declarations(job_dir))

    def last() -> None:
        stop.set()
        prune(root, keep, pinned(job_dir), settle=0.0, declared=checkpoints.declarations(job_dir))

    thread = threading.Thread(target=loop, name="disttrain-retention", daemon=True)
    thread.start()
    atexit.register(last)
    return thread
