"""Where a job's checkpoints go and the one it starts from (README "Checkpoints").

``DISTTRAIN_CHECKPOINT_DIR`` and ``DISTTRAIN_RESUME_FROM`` are set by the launch contract (and
``DISTTRAIN_RESUME_FROM`` by the rank wrapper on a restart). ``resumed_point`` says what a run
that starts from a checkpoint continues: which job, which run and from which step, read from
what the job recorded (its ``job.json``: a ``--resume``) and what the run declared
(``checkpoints.jsonl``: ``run.checkpoint``). Standard library only, and read only when asked.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..runtime import contract
from .files import read_record
from .place import LOCAL_ROOT

MAX_JOB_FILE_BYTES = 1 << 20


def resume_from() -> str | None:
    """The checkpoint this process starts from: ``$DISTTRAIN_RESUME_FROM`` (set by ``--resume``,
    the resume route, and for the restarted ranks of a job), or None on a fresh start."""
    return os.environ.get(contract.RESUME_FROM_ENV) or None


def checkpoint_dir() -> str:
    """Where this job's checkpoints go: ``$DISTTRAIN_CHECKPOINT_DIR`` in a job (the product lists
    what appears there), ``./.disttrain/checkpoints`` outside one. Made if missing."""
    chosen = os.environ.get(contract.CHECKPOINT_DIR_ENV)
    path = chosen or os.path.join(os.getcwd(), LOCAL_ROOT, contract.CHECKPOINTS_DIR)
    os.makedirs(path, exist_ok=True)
    return path


def _same(a: str, b: str) -> bool:
    return os.path.normpath(a) == os.path.normpath(b)


def declared_step(run_dir: Path, path: str) -> int | None:
    """The step ``run.checkpoint`` declared for ``path`` in ``run_dir`` (its last declaration), as
    the checkpoint model reads a run's declarations."""
    from ..runtime.checkpoints import declared

    said = declared(str(run_dir.parent.parent), run_dir.name).get(os.path.normpath(path))
    return said.step if said is not None else None


def resumed_job() -> dict[str, Any] | None:
    """The job's own ``resumed_from`` (``--resume``: {job, checkpoint, step, kind, path, job_dir})
    from its ``job.json``, when the process starts from that checkpoint."""
    job_dir = os.environ.get(contract.JOB_DIR_ENV)
    start = resume_from()
    if not job_dir or not start:
        return None
    record = read_record(Path(job_dir) / contract.JOB_FILE, MAX_JOB_FILE_BYTES) or {}
    spec = record.get("spec")
    found = spec.get("resumed_from") if isinstance(spec, dict) else None
    if isinstance(found, dict) and isinstance(found.get("path"), str) and _same(found["path"], start):
        return found
    return None


def resumed_point(run_dir: Path, run: str) -> dict[str, Any] | None:
    """What a run starting now continues, when the process starts from a checkpoint:
    {"job", "run", "step"}: another job's run of the same name (``--resume``), else this job's
    own (a restart). None on a fresh start."""
    start = resume_from()
    if start is None:
        return None
    earlier = resumed_job()
    if earlier is not None and isinstance(earlier.get("job_dir"), str):
        old_run = Path(earlier["job_dir"]) / contract.RUNS_DIR / run
        step = earlier.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            step = declared_step(old_run, start)
        return {"job": str(earlier.get("job")), "run": run, "step": step}
    step = declared_step(run_dir, start)
    if step is None:  # found by the rank wrapper on a restart: the step its name or tag says
        from ..runtime import ckptscan

        step = next((f.step for f in ckptscan.scan_path(start, limit=1000) if f.step is not None), None)
    return {"job": os.environ.get(contract.JOB_ID_ENV), "run": run, "step": step}
