"""A job's resource samples and liveness, read from its job dir (``metrics/``, ``logs/``, ``runs/``,
``tensorboard/``) into the ``Resources`` payload.

Liveness: ``last_output`` is the modification time of the replica's log, ``last_progress`` the
newest write of its em metrics (``runs/<run>/metrics.jsonl`` is rank 0's, ``runs/<run>/rank-N/``
rank N's) or TensorBoard event files (rank 0's unless under a ``rank-N`` directory). A running
replica is *quiet* when neither changed for ``QUIET_FACTOR`` times its usual output interval
(the median gap between the output times its samples noted), and at least ``QUIET_FLOOR``
seconds; with no such history yet (fewer than three outputs seen), after ``QUIET_UNKNOWN``
seconds. A factor of 10 lets a step that is a few times slower than usual (an evaluation, a
checkpoint) pass; the floor keeps a rank that prints every second from being flagged for a
pause of a few seconds.
"""

from __future__ import annotations

import itertools
import os
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..model.specs import ReplicaStatus, iso_seconds
from ..payloads.monitoring import GpuSample, ReplicaResources, Resources, ResourceSample
from ..runtime import contract
from ..runtime.sampler import parse_samples, read_series
from ..storage.store import read_json

QUIET_FACTOR = 10
QUIET_FLOOR = 20.0
QUIET_UNKNOWN = 60.0
MAX_POINTS = 600  # per replica per answer: a sparkline needs no more
_GAPS = 50  # the usual interval is the median of this many last gaps
_SCAN_ENTRIES = 2000  # directory entries looked at for progress, at most
_TB_ENTRIES = 200  # directory entries looked at for whether a job wrote TensorBoard data, at most
DEFAULT_INTERVAL = 2.0
LIST_TAIL_BYTES = 32 * 1024  # of a series file a job listing reads first: the last ~200 samples


@dataclass(frozen=True)
class ReplicaState:
    """What the backend knows of a replica: its name, whether it has ended, when it started."""

    name: str
    ended: bool
    started: float | None

    @classmethod
    def of(cls, replica: ReplicaStatus, job_ended: bool) -> ReplicaState:
        started = iso_seconds(replica.start_time) if replica.start_time else None
        return cls(replica.name, replica.phase.is_terminal or job_ended, started)


def thin(items: list[Any], n: int) -> list[Any]:
    """At most ``n`` of ``items``, evenly spread, the last one always among them."""
    if len(items) <= n:
        return items
    step = len(items) / n
    picked = [items[len(items) - 1 - int(i * step)] for i in range(n)]
    return picked[::-1]


def usual_interval(samples: list[dict[str, Any]]) -> float | None:
    """The median gap between the distinct output times the samples noted, None with fewer than
    three of them."""
    return History.of(samples).usual


def quiet_after(usual: float | None) -> float:
    """Seconds of silence after which a running replica is flagged quiet."""
    return QUIET_UNKNOWN if usual is None else max(QUIET_FACTOR * usual, QUIET_FLOOR)


def to_sample(raw: dict[str, Any]) -> ResourceSample:
    gpus = raw.get("gpus")
    return ResourceSample(
        t=float(raw["t"]),
        cpu_percent=float(raw.get("cpu_percent", 0.0)),
        rss_bytes=int(raw.get("rss_bytes", 0)),
        threads=int(raw.get("threads", 0)),
        read_bytes=int(raw.get("read_bytes", 0)),
        write_bytes=int(raw.get("write_bytes", 0)),
        gpus=[GpuSample(**g) for g in gpus] if isinstance(gpus, list) else None,
        gpu_mem_bytes=int(raw["gpu_mem_bytes"]) if raw.get("gpu_mem_bytes") is not None else None,
    )


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _walk_files(top: Path, depth: int, budget: list[int]) -> Iterator[Path]:
    """Files under ``top`` at most ``depth`` levels down, within ``budget[0]`` entries overall."""
    try:
        entries = list(os.scandir(top))
    except OSError:
        return
    for entry in entries:
        if budget[0] <= 0:
            return
        budget[0] -= 1
        if entry.is_dir(follow_symlinks=False):
            if depth > 0:
                yield from _walk_files(Path(entry.path), depth - 1, budget)
        elif entry.is_file(follow_symlinks=False):
            yield Path(entry.path)


def wrote_tensorboard(job_dir: Path) -> bool:
    """Whether the job wrote TensorBoard event files (a bounded look: a listing asks for each job)."""
    budget = [_TB_ENTRIES]
    return any("tfevents" in p.name for p in _walk_files(job_dir / contract.TENSORBOARD_DIR, 3, budget))


def progress_times(job_dir: Path) -> dict[str, float]:
    """The newest em metric or TensorBoard event write of each replica that made any."""
    out: dict[str, float] = {}
    budget = [_SCAN_ENTRIES]
    candidates = [
        *(p for p in _walk_files(job_dir / "runs", 2, budget) if p.name == "metrics.jsonl"),
        *(p for p in _walk_files(job_dir / contract.TENSORBOARD_DIR, 3, budget) if "tfevents" in p.name),
    ]
    for path in candidates:
        ranks = [part for part in path.parts[-3:-1] if part.startswith("rank-")]
        replica = ranks[-1] if ranks else contract.rank_name(0)
        t = _mtime(path)
        if t is not None and t > out.get(replica, 0.0):
            out[replica] = t
    return out


def sampled_replicas(job_dir: Path) -> list[str]:
    """The replicas that have a series file, ranks in rank order, then others by name (Kubernetes:
    the pods' samplers name the ranks they found, or the one process a role's pod runs)."""
    try:
        names = [p.name[: -len(".jsonl")] for p in (job_dir / contract.METRICS_DIR).glob("*.jsonl")]
    except OSError:
        return []
    ranked = [n for n in names if n.startswith("rank-") and n[5:].isdigit()]
    return sorted(ranked, key=lambda n: int(n[5:])) + sorted(set(names) - set(ranked))


def monitor_info(job_dir: Path) -> dict[str, Any] | None:
    """``metrics/monitor.json``: how the job's sampler runs (None when it never ran)."""
    try:
        data: dict[str, Any] = read_json(job_dir / contract.METRICS_DIR / contract.MONITOR_FILE)
        return data
    except (OSError, ValueError):
        return None


def _series_path(job_dir: Path, replica: str) -> Path:
    return job_dir / contract.METRICS_DIR / contract.metrics_file(replica)


@dataclass
class History:
    """What liveness needs of a series: its newest distinct output times (enough for the usual
    interval) and the last sample's."""

    outs: list[float]
    last_out: float | None

    @classmethod
    def of(cls, samples: list[dict[str, Any]]) -> History:
        history = cls([], None)
        history.add(samples)
        return history

    def add(self, samples: list[dict[str, Any]]) -> None:
        outs = [float(s["out"]) for s in samples if isinstance(s.get("out"), (int, float))]
        if samples:
            self.last_out = outs[-1] if isinstance(samples[-1].get("out"), (int, float)) else None
        self.outs = sorted({*self.outs, *outs})[-(_GAPS + 1) :]

    @property
    def usual(self) -> float | None:
        gaps = [b - a for a, b in itertools.pairwise(self.outs)]
        return statistics.median(gaps) if len(gaps) >= 2 else None


def liveness(
    job_dir: Path, rep: ReplicaState, history: History, last_progress: float | None, now: float
) -> tuple[float | None, float | None, bool]:
    """``rep``'s last output, last progress and whether it is quiet."""
    # The rank's own log; on Kubernetes its pod's, whose time the pod's sampler notes.
    outs = [_mtime(job_dir / contract.LOGS_DIR / contract.log_file(rep.name)), history.last_out]
    last_output = max((t for t in outs if t is not None), default=None)
    seen = [t for t in (last_output, last_progress, rep.started) if t is not None]
    quiet = bool(seen) and not rep.ended and now - max(seen) > quiet_after(history.usual)
    return last_output, last_progress, quiet


@dataclass
class _Tail:
    inode: int
    offset: int  # read up to here (the end of a whole line)
    history: History


class SeriesTails:
    """The ``History`` of each series file a job listing looks at, kept between listings so that
    each listing reads only the lines appended since the last (a sample or two), not the series.

    A file seen first (or rewritten by compaction: a new inode) is read from its last
    ``LIST_TAIL_BYTES``, or as the details read it when those hold too few outputs to tell the
    replica's usual interval (a rank that prints rarely)."""

    def __init__(self, limit: int = 4096) -> None:
        self._tails: dict[str, _Tail] = {}
        self._limit = limit  # series followed at once; past it all are forgotten, then reread
        self._lock = threading.Lock()

    def history(self, path: Path) -> History:
        with self._lock:
            key = str(path)
            try:
                with open(path, "rb") as f:
                    st = os.fstat(f.fileno())
                    tail = self._tails.get(key)
                    if tail is None or tail.inode != st.st_ino or st.st_size < tail.offset:
                        tail = self._first(f, key, st.st_ino, st.st_size)
                    else:
                        tail.offset += _follow(f, tail.offset, st.st_size, tail.history)
            except OSError:
                self._tails.pop(key, None)
                return History([], None)
            if len(self._tails) >= self._limit:
                self._tails.clear()
            self._tails[key] = tail
            return tail.history

    @staticmethod
    def _first(f: BinaryIO, path: str, inode: int, size: int) -> _Tail:
        history = History([], None)
        start = max(0, size - LIST_TAIL_BYTES)
        consumed = _follow(f, start, size, history, skip_partial=start > 0)
        if history.usual is None and start > 0:
            history = History.of(read_series(path))  # its history lies further back
        return _Tail(inode, start + consumed, history)


def _follow(f: BinaryIO, start: int, size: int, history: History, skip_partial: bool = False) -> int:
    """Add the whole lines of ``f`` from ``start`` (at most ``4 * LIST_TAIL_BYTES`` of them) to
    ``history``; the bytes consumed."""
    f.seek(start)
    data = f.read(min(size - start, 4 * LIST_TAIL_BYTES))
    end = data.rfind(b"\n") + 1  # a line being written is read next time
    first = data.find(b"\n") + 1 if skip_partial else 0  # started mid-line
    history.add(parse_samples(data[first:end]))
    return end


def quiet_replicas(job_dir: Path, replicas: list[ReplicaState], tails: SeriesTails) -> list[str]:
    """The replicas ``read_resources`` would flag quiet, for a job listing: from each series
    only what ``tails`` has not read yet, and no samples are made."""
    running = [rep for rep in replicas if not rep.ended]
    if not running:
        return []
    now = time.time()
    progress: dict[str, float] | None = None
    out = []
    for rep in running:
        history = tails.history(_series_path(job_dir, rep.name))
        last_output, _, quiet = liveness(job_dir, rep, history, None, now)
        if not quiet and (last_output is not None or rep.started is not None):
            continue  # heard from lately: a progress write, newer still, cannot make it quiet
        if progress is None:  # a directory scan: only for a job with a replica that looks quiet
            progress = progress_times(job_dir)
        if liveness(job_dir, rep, history, progress.get(rep.name), now)[2]:
            out.append(rep.name)
    return out


def read_resources(
    job_dir: Path, replicas: list[ReplicaState], since: float | None = None, message: str | None = None
) -> Resources:
    """Each replica's samples newer than ``since`` and its liveness, from the job dir."""
    now = time.time()
    info = monitor_info(job_dir)
    if info is None and message is None:
        message = "no resource samples: the job runs with --monitor-interval 0, or started before monitoring"
    progress = progress_times(job_dir)
    out: dict[str, ReplicaResources] = {}
    for rep in replicas:
        raw = read_series(str(_series_path(job_dir, rep.name)))
        new = [s for s in raw if since is None or s["t"] > since]
        history = History.of(raw)
        last_output, last_progress, quiet = liveness(job_dir, rep, history, progress.get(rep.name), now)
        samples = [to_sample(s) for s in thin(new, MAX_POINTS)]
        out[rep.name] = ReplicaResources(samples, rep.ended, last_output, last_progress, quiet)
    interval = float(info.get("interval", DEFAULT_INTERVAL)) if info else DEFAULT_INTERVAL
    source = str(info.get("source")) if info else None
    return Resources(interval, now, source, message, out)
