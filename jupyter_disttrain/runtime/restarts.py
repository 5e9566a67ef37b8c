"""A restarted rank starts from the job's newest complete checkpoint (README "Checkpoints").

A rank is restarted when torchrun restarts its group (``--max-restarts``:
``TORCHELASTIC_RESTART_COUNT`` > 0), when Slurm requeues the job (``SLURM_RESTART_COUNT`` > 0), or
when its replica's record from an earlier start is already in the job dir (``ranks/<replica>.json``:
a requeue or a replaced process on the same shared job dir). Such a rank gets
``DISTTRAIN_RESUME_FROM`` = the newest complete checkpoint: in ``DISTTRAIN_CHECKPOINT_DIR`` or
declared by ``run.checkpoint`` (``runs/*/checkpoints.jsonl``), the one with the highest step (then
the newest). Without one it keeps what it had (a ``--resume``'s checkpoint, or none).

The rank wrapper (``worker.py``) tells a restart and imports this module only then, so a first
start pays nothing for it. Standard library only.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from . import ckptscan, contract
from .importhook import after_import
from .regularfile import read_head

MAX_DECLARED_BYTES = 4 << 20  # of each run's checkpoints.jsonl
MAX_RUNS = 100


def newest(job_dir: str | None, checkpoint_dir: str | None) -> ckptscan.Found | None:
    """The newest complete checkpoint of the job: the highest step, then the newest file.

    Every rank of the group chooses alone, so each must choose the same: the earlier attempt's
    ranks are all gone when a group restarts, so a checkpoint still settling (written in the last
    ``SETTLE_SECONDS``, which the scan counts as maybe growing) is waited for rather than skipped.
    """
    found = _candidates(job_dir, checkpoint_dir)
    recent = max((f.mtime for f in found), default=0.0) + ckptscan.SETTLE_SECONDS - time.time()
    if recent > 0:
        time.sleep(recent + 0.1)
        found = _candidates(job_dir, checkpoint_dir)
    complete = [f for f in found if f.complete]
    return max(complete, key=lambda f: (-1 if f.step is None else f.step, f.mtime)) if complete else None


def _candidates(job_dir: str | None, checkpoint_dir: str | None) -> list[ckptscan.Found]:
    found = ckptscan.scan(checkpoint_dir) if checkpoint_dir else []
    for path, step in _declared(job_dir):
        for one in ckptscan.scan_path(path, limit=1000):
            found.append(ckptscan.with_step(one, step, "declared") if step is not None else one)
    return found


def _declared(job_dir: str | None) -> list[tuple[str, int | None]]:
    """(path, step) of every checkpoint the job's runs declared."""
    runs = os.path.join(job_dir, contract.RUNS_DIR) if job_dir else None
    if not runs or not os.path.isdir(runs):
        return []
    return [
        found for run in sorted(os.listdir(runs))[:MAX_RUNS] for found in declared(os.path.join(runs, run))
    ]


def declared(run_dir: str | os.PathLike[str]) -> list[tuple[str, int | None]]:
    """(path, step) of each checkpoint a run declared (``run.checkpoint``), in order; bounded."""
    try:
        lines = read_head(os.path.join(run_dir, contract.CHECKPOINTS_FILE), MAX_DECLARED_BYTES).splitlines()
    except OSError:
        return []
    out: list[tuple[str, int | None]] = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
            step = entry.get("step")
            out.append(
                (entry["path"], step if isinstance(step, int) and not isinstance(step, bool) else None)
            )
    return out


def _say(line: str) -> None:
    print(f"disttrain: {line}", flush=True)


def resume_from_newest(job_dir: str | None, say: Callable[[str], object] = _say) -> str | None:
    """Point ``DISTTRAIN_RESUME_FROM`` at the job's newest complete checkpoint, if it has one;
    returns it. Never fails the rank: a checkpoint it cannot read leaves the variable as it was.
    ``say`` tells what happened where the job's output goes (the pod wrapper passes its own)."""
    try:
        chosen = newest(job_dir, os.environ.get(contract.CHECKPOINT_DIR_ENV))
    except OSError as exc:
        say(f"restarted, but could not look for a checkpoint: {exc}")
        return None
    if chosen is None:
        return None
    os.environ[contract.RESUME_FROM_ENV] = chosen.path
    say(f"restarted: {contract.RESUME_FROM_ENV}={chosen.path} (step {chosen.step})")
    return chosen.path


def separate_attempt_store() -> None:
    """Give a restarted group's process group keys of its own in the agent's store.

    torchrun (torch 2.13) keeps one store for every attempt (``TORCHELASTIC_USE_AGENT_STORE``)
    while torch's ``env://`` rendezvous expects a new one per attempt and adds no prefix: the
    restarted ranks then read the dead ranks' gloo addresses and fail ("connectFullMesh failed
    ... Connection refused"), so ``--max-restarts`` never recovered a job with a process group.
    On a restart, the store the ranks get is prefixed with the attempt (patched after the script
    imports ``torch.distributed.rendezvous``; a first attempt is not touched)."""
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if attempt in ("", "0") or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return

    def patch(module: Any) -> None:  # torch.distributed.rendezvous; torch is not imported here
        create = module._create_c10d_store

        def create_c10d_store(*args: Any, **kwargs: Any) -> Any:
            store = create(*args, **kwargs)
            if not module._torchelastic_use_agent_store():
                return store
            from torch.distributed import PrefixStore

            return PrefixStore(f"/disttrain/attempt_{attempt}", store)

        module._create_c10d_store = create_c10d_store

    after_import("torch.distributed.rendezvous", patch)
