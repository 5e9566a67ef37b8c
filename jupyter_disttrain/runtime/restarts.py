"""A restarted rank starts from the job's newest complete checkpoint (README "Checkpoints").

A rank is restarted when torchrun restarts its group (``--max-restarts``:
``TORCHELASTIC_RESTART_COUNT`` > 0), when Slurm requeues the job (``SLURM_RESTART_COUNT`` > 0), or
when its replica's record from an earlier start is already in the job dir (``ranks/<replica>.json``:
a requeue or a replaced process on the same shared job dir). Such a rank gets
``DISTTRAIN_RESUME_FROM`` = the job's newest complete checkpoint, as the checkpoint model
(``checkpoints.py``) decides it for every reader: in ``DISTTRAIN_CHECKPOINT_DIR`` or declared by
``run.checkpoint`` (``runs/*/checkpoints.jsonl``), the one with the highest step (then the
newest). Without one it keeps what it had (a ``--resume``'s checkpoint, or none).

The rank wrapper (``worker.py``) tells a restart and imports this module only then, so a first
start pays nothing for it. Standard library only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from . import checkpoints, ckptscan, contract
from .checkpoints import Found
from .importhook import after_import


def newest(job_dir: str | None, checkpoint_dir: str | None) -> Found | None:
    """The job's newest complete checkpoint (``checkpoints.newest_complete``), in its checkpoint
    dir or declared by its runs: what ``--resume JOB`` and the listing's ``latest`` name too.

    Every rank of the group chooses alone, so each must choose the same: the earlier attempt's
    ranks are all gone when a group restarts, so a checkpoint still settling (written in the last
    ``SETTLE_SECONDS``, which the scan counts as maybe growing) is waited for rather than skipped.
    """
    found = _found(job_dir, checkpoint_dir)
    recent = max((f.mtime for f in found), default=0.0) + checkpoints.SETTLE_SECONDS - time.time()
    if recent > 0:
        time.sleep(recent + 0.1)
        found = _found(job_dir, checkpoint_dir)
    return checkpoints.newest_complete(found)


def _found(job_dir: str | None, checkpoint_dir: str | None) -> list[Found]:
    declared = checkpoints.declarations(job_dir) if job_dir else {}
    return ckptscan.scan_job(checkpoint_dir, declared)[0]


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
