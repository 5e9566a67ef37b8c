"""Note the size of the process group a rank joined, without importing torch ourselves.

A rank that never joins the job's process group trains alone on all the data while its job
says Succeeded (Accelerate on CPU without ``ACCELERATE_USE_CPU``, Lightning with one CPU
device). Scripts usually call ``destroy_process_group`` before they exit, so the state at exit
says nothing; instead, when the script itself imports ``torch.distributed``, its
``init_process_group`` is wrapped to remember the world size it joined. Nothing is imported or
changed for a script that never imports torch.distributed.

A group the script destroys is kept here until the script has made its next default group, or
the rank ends (past the interpreter's teardown: ``worker._exit_before_teardown``). Its C++
destructor, run wherever its last reference goes (a DDP model released as ``main()`` returns,
after ``destroy_process_group``), waits for gloo's worker threads while holding the GIL; a worker
that has just finished a collective is at that moment releasing the work, whose captured
thread-local state holds a Python object (the autograd context torch stashes during each
backward), and waits for the GIL: a deadlock, likelier when torch._dynamo was imported before
the group was made (a warm rank's, or a script that imports a library that imports it).

A warm rank (forked from the zygote, which watched before it imported torch) has
torch.distributed loaded before its script runs: whether its script imported torch is
``torchimport``'s answer.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from . import torchimport
from .importhook import after_import

_C10D = "torch.distributed.distributed_c10d"
_joined: list[int] = []  # world sizes of the default groups this process initialised
_watching: list[bool] = []
_kept: list[object] = []  # groups the script destroyed, ended only once none can be mid-collective


def _wrap(c10d: Any) -> None:  # torch's c10d module; torch is not imported here
    init = c10d.init_process_group
    destroy = c10d.destroy_process_group

    @functools.wraps(init)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        out = init(*args, **kwargs)
        _joined.append(int(c10d.get_world_size()))
        # The rendezvous waited on the store without the GIL: an older group's workers are idle.
        _kept.clear()
        return out

    @functools.wraps(destroy)
    def destroy_process_group(group: Any = None, *args: Any, **kwargs: Any) -> Any:
        everything = group is None or group == c10d.GroupMember.WORLD
        _kept.extend(list(c10d._world.pg_map) if everything else [group])
        return destroy(group, *args, **kwargs)

    c10d.init_process_group = init_process_group
    c10d.destroy_process_group = destroy_process_group


def watch() -> None:
    """Start watching (before the script runs); a no-op if torch.distributed is loaded already,
    unless this process watched before it was loaded (a warm rank: its imports are traced)."""
    if _C10D not in sys.modules and not _watching:
        after_import(_C10D, _wrap)
        _watching.append(True)
    elif _watching:
        torchimport.trace()


def joined_world() -> int | None:
    """The largest process group this rank joined: 1 if it never joined one, None if the script
    never imported torch.distributed (so it cannot have meant to)."""
    if _C10D not in sys.modules or not _watching:
        return None
    if torchimport.tracing() and not torchimport.seen() and not _joined:
        return None
    return max(_joined, default=1)


def joined_any() -> bool:
    """Whether this rank has called ``init_process_group`` (even if it destroyed the group since)."""
    return bool(_joined)


def lone_ranks(world_size: int, records: dict[int, dict[str, Any]]) -> str | None:
    """A warning when ranks of a job of ``world_size`` > 1 ran in a smaller world (or none).

    ``records`` are the ranks' records (``ranks/rank-N.json``) with ``joined_world`` and
    ``exit_code`` set at exit.
    """
    if world_size < 2:
        return None
    lone = {  # ranks that finished their work; one that crashed before joining did not train alone
        r: w
        for r, rec in sorted(records.items())
        if rec.get("exit_code") == 0 and (w := rec.get("joined_world")) is not None and w != world_size
    }
    if not lone:
        return None
    names = ", ".join(f"rank-{r} (world of {w})" for r, w in lone.items())
    return (
        f"{names} never joined the job's process group of {world_size}: each such rank trained "
        "alone, on all its data. On CPU, Accelerate needs ACCELERATE_USE_CPU=1 (set for CPU jobs) and "
        "Lightning needs Trainer(devices=<--gpus>, num_nodes=<--nodes>)"
    )
