"""A job's checkpoints, as the REST API, the CLI and resume see them (README "Checkpoints").

The index is the job's checkpoints as the checkpoint model has them (``runtime/checkpoints.py``:
its checkpoint dir and what its runs declared, in the model's order, the newest complete one
marked ``latest``), with what em's run says of each: a checkpoint whose name says no step gets
the step the run logged last before it was written, and each gets the run's metrics at its step.
Ids are the model's (``checkpoint_id``: a hash of the path, relative to the job dir when inside).

Every read is bounded: the scan (entries and depth: one budget for the checkpoint dir and every
declared path together), the declarations as the model reads them, and the run's metrics, read
on from where the last listing stopped and thinned past MAX_HISTORY points.
"""

from __future__ import annotations

import bisect
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..payloads.checkpoints import Checkpoint, CheckpointUsage
from ..payloads.runs import MetricValue, RunPoint
from ..runtime import checkpoints, ckptscan
from ..runtime.checkpoints import SCAN_LIMIT, SETTLE_SECONDS, Declared, Found
from ..runtime.contract import CHECKPOINTS_DIR, METRICS_FILE, RUNS_DIR
from ..storage.safefiles import open_beneath
from .runs import RunsReader, parse_lines

MAX_HISTORY = 50_000  # points of a run kept to tell the metrics at a checkpoint's step
READ_BYTES = 8 << 20  # of a run's metrics.jsonl per listing (the next listing reads on)


def checkpoint_dir(job_dir: Path) -> Path:
    return job_dir / CHECKPOINTS_DIR


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


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
        settle: float = SETTLE_SECONDS,
        limit: int = SCAN_LIMIT,
    ) -> tuple[list[Checkpoint], CheckpointUsage]:
        """The job's checkpoints in the model's order (oldest first) and their usage, the newest
        complete one its ``latest``. A file written in the last ``settle`` seconds may still be
        growing (0 once no process of the job is left). At most ``limit`` directory entries are
        looked at, the checkpoint dir's and every declared path's together (``usage.more`` says
        some were left); a checkpoint is listed once however many declared paths reach it."""
        declared = checkpoints.declarations(str(job_dir))
        found, budget = ckptscan.scan_job(str(checkpoint_dir(job_dir)), declared, settle=settle, limit=limit)
        runs = [run for run in self.runs.run_names(job_dir) if self.runs.record(job_dir, run) is not None]
        history = self._history(job_dir, runs[-1]) if runs else None
        if history is not None:  # a checkpoint that says no step: the step em logged before it
            found = sorted((_em_step(f, history) for f in found), key=checkpoints.order)
        newest = checkpoints.newest_complete(found)
        out = [self._entry(job_dir, f, declared.get(f.path), history, runs, f.path in pinned) for f in found]
        usage = CheckpointUsage(
            count=len(out),
            complete=sum(1 for c in out if c.complete),
            bytes=sum(c.size for c in out),
            keep=keep,
            latest=checkpoints.checkpoint_id(str(job_dir), newest.path) if newest else None,
            more=budget.hit,
        )
        return out, usage

    def _entry(
        self,
        job_dir: Path,
        found: Found,
        declared: Declared | None,
        history: _History | None,
        runs: list[str],
        pinned: bool,
    ) -> Checkpoint:
        step = found.step
        return Checkpoint(
            id=checkpoints.checkpoint_id(str(job_dir), found.path),
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
            step_source=found.step_source,
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


def _em_step(found: Found, history: _History) -> Found:
    """``found`` with the step the run logged last before it was written, if it says none."""
    if found.step is not None:
        return found
    step = history.step_at(found.mtime)
    return found if step is None else checkpoints.with_step(found, step, "em")
