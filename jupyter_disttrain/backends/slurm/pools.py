"""Slurm's warm pools: the keepers of this user's allocations (``keeper.py``), found by their
sockets in the runtime dir (so a restarted kernel, or the Jupyter server, finds them again), each
asked for its warm steps; one released by its id; a keeper of an older fingerprint released once a
new one of the same allocation and environment serves (its jobs finish first)."""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path
from typing import Any

from ...model.errors import BackendError, PoolBusyError
from ...payloads.pools import Pool, PoolNode, ReleaseAnswer
from ..warm.plan import WarmUnavailable, zygote_dir
from ..warm.zygote_protocol import exchange, held

SOCKET_NAME = re.compile(r"slurm-(?P<allocation>\d+)-(?P<fingerprint>[0-9a-f]{20})\.sock")
ASK_TIMEOUT = 5.0  # seconds a keeper (a select loop that never blocks on a job) has to answer
# Seconds a release waits for its keeper to end: each step's agents get torchrun's close first.
RELEASE_WAIT = 60.0


def alive(path: Path) -> bool:
    """Whether a keeper (``keeper.py``) listens at ``path`` (it holds the lock beside it while it lives)."""
    return held(path.with_suffix(".lock"))


def keepers(directory: Path | None = None) -> list[Path]:
    """The sockets of the live keepers in this user's runtime dir (``directory``)."""
    try:
        directory = directory or zygote_dir()
    except (WarmUnavailable, OSError):
        return []
    return sorted(p for p in directory.glob("slurm-*.sock") if SOCKET_NAME.fullmatch(p.name) and alive(p))


def status(path: Path) -> dict[str, Any] | None:
    """A keeper's answer to ``status``; None when it did not give one (it is ending)."""
    try:
        answer = exchange(path, {"op": "status"}, ASK_TIMEOUT)
    except (OSError, ValueError):
        return None
    return answer if answer.get("ok") and isinstance(answer.get("steps"), list) else None


def pools() -> list[Pool]:
    """A pool per live keeper holding a warm step."""
    found = []
    for path in keepers():
        answer = status(path)
        if answer and answer["steps"]:
            found.append(pool_of(path, answer["steps"], time.time()))
    return found


def pool_of(path: Path, steps: list[dict[str, Any]], now: float) -> Pool:
    """The pool a keeper's steps make: idle since its last job ended, released once the last of
    its steps has been idle for its idle time."""
    named = SOCKET_NAME.fullmatch(path.name)
    assert named is not None
    nodes = [
        PoolNode(
            node=int(s.get("node") or 0),
            host=str(s.get("host") or "?"),
            step=str(s.get("step") or "?"),
            accelerators=[str(g) for g in s.get("gpus") or []],
            jobs=[str(j) for j in s.get("jobs") or []],
        )
        for s in steps
    ]
    jobs = sorted({job for node in nodes for job in node.jobs})
    idle_for = releases_in = None
    if not jobs:
        since = [float(s.get("idle_since") or now) for s in steps]
        idle_for = max(0.0, now - max(since))
        ends = [float(s.get("idle_since") or now) + float(s.get("idle") or 0) for s in steps]
        releases_in = max(0.0, max(ends) - now)
    return Pool(
        id=path.stem,
        backend="slurm",
        place=f"allocation {named['allocation']}",
        fingerprint=named["fingerprint"],
        nodes=nodes,
        accelerators=sum(len(node.accelerators) for node in nodes),
        jobs=jobs,
        idle_for=idle_for,
        releases_in=releases_in,
    )


def release(pool: Pool, force: bool) -> ReleaseAnswer:
    """Tell the pool's keeper to end its warm steps and wait (bounded) until it has ended. A pool
    running a job is refused (PoolBusyError) unless ``force``: the job would fail."""
    path = zygote_dir() / f"{pool.id}.sock"
    try:
        answer = exchange(path, {"op": "release", "force": force}, ASK_TIMEOUT)
    except (OSError, ValueError) as exc:
        raise BackendError(f"the keeper of pool {pool.id} did not answer: {exc}") from None
    if not answer.get("ok"):
        jobs = ", ".join(answer.get("busy") or ["?"])
        raise PoolBusyError(
            f"pool {pool.id} runs job {jobs}: cancel it first, or release the pool by force "
            "(--force; REST: ?force=true), which fails the job"
        )
    deadline = time.monotonic() + RELEASE_WAIT
    while alive(path) and time.monotonic() < deadline:
        time.sleep(0.1)
    steps = ", ".join(f"{node.step} on {node.host}" for node in pool.nodes)
    if alive(path):
        return ReleaseAnswer(pool.id, False, f"releasing: its warm steps ({steps}) are still ending")
    return ReleaseAnswer(pool.id, True, f"released: its warm steps ({steps}) have ended")


def release_stale(own: Path, env_key: str) -> None:
    """Release, as their jobs end, the keepers of ``own``'s allocation and environment of another
    fingerprint (a ``pip install`` made ``own``'s: theirs will never be used again)."""
    mine = SOCKET_NAME.fullmatch(own.name)
    if mine is None:
        return
    for path in keepers(own.parent):
        theirs = SOCKET_NAME.fullmatch(path.name)
        if path == own or theirs is None or theirs["allocation"] != mine["allocation"]:
            continue
        answer = status(path)
        if answer is not None and answer.get("env_key") == env_key:
            with contextlib.suppress(OSError, ValueError):
                exchange(path, {"op": "release", "drain": True}, ASK_TIMEOUT)
                print(f"keeper: {path.name} is of an older fingerprint: released as its jobs end", flush=True)
