"""A job's checkpoints, as the REST API, the CLI and resume see them (README "Checkpoints").

The index is what ``runtime/ckptscan.py`` finds in the job's checkpoint dir
(``DISTTRAIN_CHECKPOINT_DIR``) plus what its runs declared with ``run.checkpoint(path,
step=...)`` (``runs/<run>/checkpoints.jsonl``, anywhere on disk). A checkpoint whose name says
no step gets the step the run logged last before it was written; each gets the run's metrics at
its step. Ids are stable: a hash of the path (relative to the job dir when inside it).

Every read is bounded: the scan (entries and depth: one budget for the checkpoint dir and every
declared path together), the last MiB of each declarations file, and the run's metrics, read on
from where the last listing stopped and thinned past MAX_HISTORY points.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..payloads import Checkpoint, CheckpointUsage, MetricValue, RunPoint
from ..runtime import ckptscan
from ..runtime.contract import CHECKPOINTS_DIR, CHECKPOINTS_FILE, METRICS_FILE, RUNS_DIR
from ..storage.safefiles import open_beneath
from .runs import RunsReader, parse_lines

SCAN_LIMIT = 20_000  # directory entries looked at per listing (checkpoint dir and declared paths)
MAX_DECLARED_BYTES = 1 << 20  # of each run's checkpoints.jsonl: the newest part
MAX_DECLARED = 1000  # declared paths looked at per run (the newest)
MAX_HISTORY = 50_000  # points of a run kept to tell the metrics at a checkpoint's step
READ_BYTES = 8 << 20  # of a run's metrics.jsonl per listing (the next listing reads on)


def checkpoint_id(job_dir: Path, path: str) -> str:
    """``c`` and 12 hex digits of a hash of the path (relative to the job dir when inside it)."""
    prefix = f"{job_dir}{os.sep}"
    key = path[len(prefix) :] if path.startswith(prefix) else path
    return "c" + hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:12]


def checkpoint_dir(job_dir: Path) -> Path:
    return job_dir / CHECKPOINTS_DIR


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class _Declared:
    run: str
    step: int | None


@dataclass
class _History:
    """What a listing keeps of one run's metrics: (time, step) of each stepped point and each
    metric's (step, value), in the order logged."""

    ident: tuple[int, int]
    offset: int = 0
    times: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    series: dict[str, list[tuple[int, MetricValue]]] = field(default_factory=dict)
    count: int = 0

    def add(self, points: list[RunPoint]) -> None:
        for p in points:
            if p.step is None:
                continue
            self.times.append(p.time)
            self.steps.append(p.step)
            self.series.setdefault(f"{p.type}/{p.name}", []).append((p.step, p.value))
            self.count += 1
        if self.count > MAX_HISTORY:  # every other point of the older ones: the newest stay
            self.times, self.steps = self.times[-MAX_HISTORY // 2 :], self.steps[-MAX_HISTORY // 2 :]
            self.series = {k: v[:-1][::2] + v[-1:] for k, v in self.series.items()}
            self.count = sum(len(v) for v in self.series.values())

    def step_at(self, seconds: float) -> int | None:
        """The step logged last at or before ``seconds``."""
        at = bisect.bisect_right(self.times, seconds)
        return self.steps[at - 1] if at else None

    def metrics_at(self, step: int) -> dict[str, MetricValue]:
        out: dict[str, MetricValue] = {}
        for key, values in self.series.items():
            at = bisect.bisect_right(values, step, key=lambda sv: sv[0])
            if at:
                out[key] = values[at - 1][1]
        return dict(sorted(out.items()))


class CheckpointIndex:
    """Indexes jobs' checkpoints; remembers how far it read each run's metrics (thread-safe)."""

    def __init__(self, runs: RunsReader) -> None:
        self.runs = runs
        self._histories: dict[str, _History] = {}
        self._lock = threading.Lock()

    def index(
        self,
        job_dir: Path,
        *,
        pinned: set[str],
        keep: int,
        settle: float = ckptscan.SETTLE_SECONDS,
        limit: int = SCAN_LIMIT,
    ) -> tuple[list[Checkpoint], CheckpointUsage]:
        """The job's checkpoints oldest first (by step, then time) and their usage. A file written
        in the last ``settle`` seconds may still be growing (0 once no process of the job is left).
        At most ``limit`` directory entries are looked at, the checkpoint dir's and every declared
        path's together (``usage.more`` says some were left); a checkpoint is listed once however
        many declared paths reach it."""
        runs = [run for run in self.runs.run_names(job_dir) if self.runs.record(job_dir, run) is not None]
        declared = {path: d for run in runs for path, d in _declarations(job_dir, run).items()}
        found, budget = _found(str(checkpoint_dir(job_dir)), sorted(declared), settle, limit)
        history = self._history(job_dir, runs[-1]) if runs else None
        out = [
            self._entry(job_dir, f, declared.get(f.path), history, runs, f.path in pinned)
            for f in found.values()
        ]
        out.sort(key=lambda c: (-1 if c.step is None else c.step, c.time or "", c.path))
        complete = [c for c in out if c.complete]
        usage = CheckpointUsage(
            count=len(out),
            complete=len(complete),
            bytes=sum(c.size for c in out),
            keep=keep,
            latest=complete[-1].id if complete else None,
            more=budget.hit,
        )
        return out, usage

    def _entry(
        self,
        job_dir: Path,
        found: ckptscan.Found,
        declared: _Declared | None,
        history: _History | None,
        runs: list[str],
        pinned: bool,
    ) -> Checkpoint:
        step, source = found.step, found.step_source
        if declared is not None and declared.step is not None:
            step, source = declared.step, "declared"
        if step is None and history is not None:
            step = history.step_at(found.mtime)
            source = None if step is None else "em"
        return Checkpoint(
            id=checkpoint_id(job_dir, found.path),
            path=found.path,
            kind=found.kind,
            step=step,
            epoch=found.epoch,
            time=iso(found.mtime) if found.mtime else None,
            size=found.size,
            complete=found.complete,
            metrics=history.metrics_at(step) if history is not None and step is not None else {},
            run=declared.run if declared is not None else (runs[-1] if runs else None),
            declared=declared is not None,
            step_source=source,
            world_size=found.world_size,
            pinned=pinned,
        )

    def _history(self, job_dir: Path, run: str) -> _History:
        """The run's history, read on (bounded) from where the last listing stopped."""
        record = self.runs.record(job_dir, run) or {}
        # rank 0's when each rank records its own (create_run(..., ranks="all"))
        parts = [RUNS_DIR, run, *(["rank-0"] if record.get("ranks") == "all" else []), METRICS_FILE]
        key = os.path.join(job_dir, *parts)
        with self._lock:
            history = self._histories.get(key) or _History((0, 0))
            try:
                f = open_beneath(job_dir, parts)
            except (OSError, ValueError):
                return history
            with f:
                st = os.fstat(f.fileno())
                if history.ident != (st.st_dev, st.st_ino) or st.st_size < history.offset:
                    history = _History((st.st_dev, st.st_ino))
                f.seek(history.offset)
                chunk = f.read(min(READ_BYTES, st.st_size - history.offset))
            end = chunk.rfind(b"\n") + 1
            history.add(parse_lines(chunk[:end].split(b"\n")))
            history.offset += end
            self._histories[key] = history
            return history


def _found(
    at: str, declared: list[str], settle: float, limit: int
) -> tuple[dict[str, ckptscan.Found], ckptscan.Budget]:
    """What the checkpoint dir ``at`` and the ``declared`` paths hold, by path, within one budget
    of ``limit`` entries (each declared path costs one too). Each is kept once by its real path:
    declared paths that are the same directory by other names, or lie in a tree already scanned,
    are not scanned again."""
    budget = ckptscan.Budget(limit)
    found: dict[str, ckptscan.Found] = {}
    real_seen: set[str] = set()
    scanned: set[str] = set()  # real paths of the trees walked

    def add(top: str, items: list[ckptscan.Found]) -> None:
        real_top = os.path.realpath(top)  # below it the walk follows no link: the rest maps as is
        scanned.add(real_top)
        for item in items:
            inside = item.path.startswith(top)
            real = real_top + item.path[len(top) :] if inside else os.path.realpath(item.path)
            if real not in real_seen:
                real_seen.add(real)
                found[item.path] = item

    add(at, ckptscan.scan(at, settle=settle, budget=budget))
    for path in declared:
        if budget.left <= 0:
            budget.hit = True
            break
        budget.left -= 1
        if path in found or _within(os.path.realpath(path), scanned):
            continue
        add(path, ckptscan.scan_path(path, settle=settle, budget=budget))
    return found, budget


def _within(real: str, trees: set[str]) -> bool:
    """Whether the real path ``real`` is one of ``trees`` or lies in one."""
    while True:
        if real in trees:
            return True
        parent = os.path.dirname(real)
        if parent == real:
            return False
        real = parent


def _declarations(job_dir: Path, run: str) -> dict[str, _Declared]:
    """The absolute paths the run declared (the newest MAX_DECLARED, from the file's last MiB)."""
    try:
        with open_beneath(job_dir, [RUNS_DIR, run, CHECKPOINTS_FILE]) as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - MAX_DECLARED_BYTES))
            lines = f.read(MAX_DECLARED_BYTES).split(b"\n")[:-1]  # the last one may be half-written
    except (OSError, ValueError):
        return {}
    out: dict[str, _Declared] = {}
    for line in lines[-MAX_DECLARED:]:
        try:
            data = json.loads(line)
            path, step = data["path"], data.get("step")
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(path, str) and os.path.isabs(path):
            good_step = isinstance(step, int) and not isinstance(step, bool)
            out[os.path.normpath(path)] = _Declared(run, step if good_step else None)
    return out
