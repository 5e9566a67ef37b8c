"""The runs of ``em`` read back from job directories, for the REST API and the runs table.

A run is ``<job dir>/runs/<run>/`` (``runtime/contract.py`` names its files). Every read is
bounded in bytes, and every file is opened one component at a time without following a link
(``safefiles.open_beneath``): the training script wrote these directories and may have planted
links in them. ``metrics.jsonl`` only grows, so ``RunsReader`` remembers how far it read each
one and a listing polled every few seconds reads only what was appended since.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from ..model.errors import InvalidSpecError, UnknownRunError
from ..model.specs import JobPhase
from ..payloads.runs import ArtifactFile, MetricValue, RunDetail, RunPoint, RunProgress, RunSummary
from ..runtime.contract import (
    ARTIFACTS_DIR,
    MANIFEST_FILE,
    METRICS_FILE,
    RUN_FILE,
    RUN_NAME_PATTERN,
    RUNS_DIR,
    TENSORBOARD_DIR,
)
from ..storage.safefiles import is_real_dir, open_beneath
from . import continued

_RUN_NAME = re.compile(RUN_NAME_PATTERN)
MAX_JSON_BYTES = 1 << 20  # a run.json or an artifact's manifest
MAX_RUNS = 1000  # per job: a listing names at most this many (the newest directories)
MAX_ARTIFACT_FILES = 10_000
MAX_METRICS = 1000  # distinct <type>/<name> a listing keeps the last value of, per run
PAGE_BYTES = 4 << 20  # of metrics.jsonl per detail page
DEFAULT_POINTS = 5000
MAX_POINTS = 50_000
# Per listing and run: past it a listing skips to the file's tail (the newest ~20,000 points), so
# a first listing of long runs stays quick; a finished run's record has every final value anyway.
CATCH_UP_BYTES = 2 << 20
# Where the total number of steps is taken from when create_run(total_steps=) was not given.
TOTAL_STEP_HPARAMS = ("total_steps", "max_steps")


def check_since(since: int | None) -> int:
    if since is not None and since < 0:
        raise InvalidSpecError("since must be 0 or more: the 'next' of an earlier answer")
    return since or 0


def check_limit(limit: int | None) -> int:
    limit = DEFAULT_POINTS if limit is None else limit
    if not 1 <= limit <= MAX_POINTS:
        raise InvalidSpecError(f"limit must be between 1 and {MAX_POINTS}")
    return limit


def check_run_name(name: str) -> str:
    if not _RUN_NAME.fullmatch(name):
        raise InvalidSpecError(
            f"run {name[:120]!r}: a run name is letters, digits, '.', '_' and '-' (at most 100)"
        )
    return name


def artifact_parts(path: str) -> list[str]:
    """``<artifact>/<file path>`` split into names, each checked (no ``..``, no empty part)."""
    parts = path.split("/")
    if (
        len(parts) < 2
        or len(path) > 4096
        or not _RUN_NAME.fullmatch(parts[0])
        or any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts)
    ):
        raise InvalidSpecError(
            f"artifact path {path[:120]!r}: give <artifact>/<file> as the run's artifacts list it"
        )
    return parts


def _read_json(job_dir: Path, parts: list[str]) -> Any:
    """A small JSON file below ``job_dir`` (None when missing, a link, too big or half-written)."""
    try:
        with open_beneath(job_dir, parts) as f:
            data = f.read(MAX_JSON_BYTES + 1)
    except (OSError, ValueError):
        return None
    if len(data) > MAX_JSON_BYTES:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def epoch_seconds(iso: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(iso).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def parse_lines(lines: list[bytes]) -> list[RunPoint]:
    """The points of whole ``metrics.jsonl`` lines (lines that are not one are left out), parsed
    in one ``json.loads`` of them all as an array: a fraction of the cost of a call per line."""
    try:
        rows = json.loads(b"[" + b",".join(line for line in lines if line.strip()) + b"]")
    except ValueError:  # a bad line somewhere: one by one
        rows = [_loads(line) for line in lines]
    return [p for data in rows if (p := point_of(data)) is not None]


def _loads(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def parse_point(line: bytes) -> RunPoint | None:
    """One ``metrics.jsonl`` line as a point (None for a line that is not one)."""
    return point_of(_loads(line))


def point_of(data: Any) -> RunPoint | None:
    try:
        value = data["value"]
        if not isinstance(value, int | float | str) or isinstance(value, bool):
            return None
        return RunPoint(
            type=str(data["type"]),
            name=str(data["name"]),
            value=value,
            step=_as_int(data.get("step")),
            epoch=_as_int(data.get("epoch")),
            time=float(data.get("time") or 0.0),
            flags=["step_backwards"] if data.get("step_backwards") else [],
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def read_points(
    job_dir: Path,
    parts: list[str],
    since: int,
    limit: int,
    keep: continued.Keep | None = None,
    max_bytes: int = PAGE_BYTES,
) -> tuple[list[RunPoint], int, bool]:
    """Up to ``limit`` points of whole lines from byte ``since``: (points, next offset, more).

    A last line without its newline (being written) is left for the next read; a line longer
    than ``max_bytes`` (not one of ``em``'s) is skipped. ``keep(offset, point)``, when given,
    chooses the points (``continued.py``: a resumed or restarted run's).
    """
    try:
        f = open_beneath(job_dir, parts)
    except FileNotFoundError:
        return [], since, False
    except (OSError, ValueError):
        return [], since, False
    with f:
        size = os.fstat(f.fileno()).st_size
        if since >= size:
            return [], since, False
        f.seek(since)
        chunk = f.read(min(max_bytes, size - since))
    end = chunk.rfind(b"\n") + 1
    if end == 0:  # no whole line: still being written, or a line too long to ever be one of ours
        return ([], since + len(chunk), True) if len(chunk) >= max_bytes else ([], since, False)
    lines = chunk[:end].split(b"\n")[:-1][:limit]
    points = parse_lines(lines) if keep is None else _kept(lines, since, keep)
    offset = sum(len(line) + 1 for line in lines)
    # More is there already: whole lines this page left (the limit), or bytes past the read.
    return points, since + offset, offset < end or since + len(chunk) < size


def _kept(lines: list[bytes], since: int, keep: continued.Keep) -> list[RunPoint]:
    out = []
    for line in lines:
        point = parse_point(line)
        if point is not None and keep(since, point):
            out.append(point)
        since += len(line) + 1
    return out


FIRST_STEP_BYTES = 64 << 10  # read from a resume's offset to find the first step logged after it


def first_step(job_dir: Path, parts: list[str], offset: int) -> int | None:
    """The first step logged in the file from byte ``offset`` (None if none in its next 64 KiB)."""
    try:
        with open_beneath(job_dir, parts) as f:
            f.seek(offset)
            chunk = f.read(FIRST_STEP_BYTES)
    except (OSError, ValueError):
        return None
    for line in chunk.split(b"\n")[:-1]:
        point = parse_point(line)
        if point is not None and point.step is not None:
            return point.step
    return None


def _size(seg: continued.Segment) -> int:
    try:
        with open_beneath(seg.job_dir, seg.parts) as f:
            return os.fstat(f.fileno()).st_size
    except (OSError, ValueError):
        return 0


@dataclass
class _Tail:
    """What a listing keeps of one metrics file: how far it read, and what it found there."""

    ident: tuple[int, int]  # (device, inode): a new file starts afresh
    offset: int = 0
    last: dict[str, MetricValue] = field(default_factory=dict)
    step: int | None = None
    first: tuple[int, float] | None = None  # (step, time) of the first stepped point read
    latest: tuple[int, float] | None = None


def _fold(tail: _Tail, points: list[RunPoint]) -> None:
    for p in points:
        key = f"{p.type}/{p.name}"
        if key in tail.last or len(tail.last) < MAX_METRICS:
            tail.last[key] = p.value
        if p.step is not None:
            tail.step = p.step
            if tail.first is None:
                tail.first = (p.step, p.time)
            tail.latest = (p.step, p.time)


def _eta(tail: _Tail, total: int | None) -> float | None:
    """Seconds left at the rate the steps went so far (None without a total or two steps)."""
    if total is None or tail.first is None or tail.latest is None:
        return None
    (s0, t0), (s1, t1) = tail.first, tail.latest
    if s1 <= s0 or t1 <= t0:
        return None
    left = max(total - s1, 0) * (t1 - t0) / (s1 - s0) - max(time.time() - t1, 0.0)
    return round(max(left, 0.0), 1)


def total_steps(record: dict[str, Any]) -> int | None:
    total = _as_int(record.get("total_steps"))
    hparams = record.get("hparams")
    hparams = hparams if isinstance(hparams, dict) else {}
    for key in TOTAL_STEP_HPARAMS:
        if total is None:
            total = _as_int(hparams.get(key))
    return total if total is None or total > 0 else None


def run_status(record: dict[str, Any], phase: JobPhase) -> str:
    status = str(record.get("status") or "running")
    return "interrupted" if status == "running" and phase.is_terminal else status


class RunsReader:
    """Reads runs; remembers each metrics file's read position (safe from several threads)."""

    def __init__(self) -> None:
        self._tails: dict[str, _Tail] = {}
        self._lock = threading.Lock()

    # -- listing -------------------------------------------------------------------------------
    def run_names(self, job_dir: Path) -> list[str]:
        """The job's runs (directories with a valid name, not links), newest last, at most MAX_RUNS."""
        runs = job_dir / RUNS_DIR
        if not is_real_dir(runs):
            return []
        found = []
        with contextlib.suppress(OSError), os.scandir(runs) as entries:
            for e in entries:
                if _RUN_NAME.fullmatch(e.name) and e.is_dir(follow_symlinks=False):
                    found.append((e.stat(follow_symlinks=False).st_mtime, e.name))
        return [name for _, name in sorted(found)[-MAX_RUNS:]]

    def summaries(
        self, job_dir: Path, job_id: str, job_name: str, phase: JobPhase, tb_prefix: str | None
    ) -> list[RunSummary]:
        out = []
        for run in self.run_names(job_dir):
            record = self.record(job_dir, run)
            if record is None:
                continue  # made but its run.json not yet written (or not em's)
            tail = self._catch_up(job_dir, self._metrics_parts(run, record, None))
            metrics = dict(tail.last)
            final = record.get("final_metrics")
            if isinstance(final, dict):  # exact, even when the listing skipped part of the file
                metrics.update({k: v for k, v in final.items() if isinstance(v, int | float | str)})
            progress = self._progress(record, tail, phase)
            hparams = record.get("hparams")
            out.append(
                RunSummary(
                    job_id=job_id,
                    job_name=job_name,
                    job_phase=phase,
                    run=run,
                    status=run_status(record, phase),
                    start_time=record.get("start_time"),
                    end_time=record.get("end_time"),
                    hparams=hparams if isinstance(hparams, dict) else {},
                    metrics=dict(sorted(metrics.items())),
                    step=progress.step,
                    total_steps=progress.total_steps,
                    eta_seconds=progress.eta_seconds,
                    artifacts=len(self._artifact_names(job_dir, run)),
                    tensorboard_run=f"{tb_prefix}/{TENSORBOARD_DIR}/{run}" if tb_prefix else None,
                )
            )
        return out

    def record(self, job_dir: Path, run: str) -> dict[str, Any] | None:
        data = _read_json(job_dir, [RUNS_DIR, run, RUN_FILE])
        return data if isinstance(data, dict) else None

    # -- one run -------------------------------------------------------------------------------
    def detail(
        self,
        job_dir: Path,
        job_id: str,
        run: str,
        phase: JobPhase,
        since: int | None = None,
        limit: int | None = None,
        rank: int | None = None,
    ) -> RunDetail:
        check_run_name(run)
        since, limit = check_since(since), check_limit(limit)
        record = self.record(job_dir, run)
        if record is None:
            raise UnknownRunError(f"job {job_id} has no run {run!r} (see GET .../jobs/{job_id}/runs)")
        ranks = self._ranks(job_dir, run, record)
        if rank is not None and rank not in ranks and not (rank == 0 and not ranks):
            raise InvalidSpecError(
                f"rank {rank}: this run has metrics of rank(s) {ranks or [0]} "
                "(with create_run(..., ranks='all') each rank records its own)"
            )
        found = continued.segments(
            job_dir,
            record,
            lambda name, rec: self._metrics_parts(name, rec, rank),
            self.record,
            _read_json,
            run,
            first_step,
        )
        if rank not in (None, 0):  # a restart's offsets are of rank 0's file
            found = [replace(seg, cuts=()) for seg in found]
        points, nxt, more = continued.page(found, since, limit, _size, read_points)
        tail = self._catch_up(job_dir, self._metrics_parts(run, record, None))
        return RunDetail(
            job_id=job_id,
            run=run,
            status=run_status(record, phase),
            record=record,
            points=points,
            next=nxt,
            more=more,
            artifacts=self.artifact_files(job_dir, run),
            progress=self._progress(record, tail, phase),
            ranks=ranks,
            resumed_at=continued.resumed_at(found),
        )

    def artifact_files(self, job_dir: Path, run: str) -> list[ArtifactFile]:
        out: list[ArtifactFile] = []
        for name in self._artifact_names(job_dir, run):
            manifest = _read_json(job_dir, [RUNS_DIR, run, ARTIFACTS_DIR, name, MANIFEST_FILE])
            files = manifest.get("files") if isinstance(manifest, dict) else None
            for entry in files if isinstance(files, list) else []:
                if len(out) >= MAX_ARTIFACT_FILES:
                    return out
                if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                    sha = entry.get("sha256")
                    out.append(
                        ArtifactFile(
                            name=name,
                            path=f"{name}/{entry['path']}",
                            size=_as_int(entry.get("size")) or 0,
                            sha256=sha if isinstance(sha, str) else None,
                        )
                    )
        return out

    def open_artifact(self, job_dir: Path, run: str, path: str) -> IO[bytes]:
        """The artifact file ``path`` (``<artifact>/<file>``) of ``run``, open for reading."""
        check_run_name(run)
        parts = artifact_parts(path)
        if parts[-1] == MANIFEST_FILE and len(parts) == 2:
            raise UnknownRunError(f"{path!r} is the artifact's manifest, not one of its files")
        try:
            return open_beneath(job_dir, [RUNS_DIR, run, ARTIFACTS_DIR, *parts])
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.EISDIR) or isinstance(
                exc, IsADirectoryError
            ):
                # A link is reported as missing: it is not a file of the run.
                raise UnknownRunError(f"run {run!r} has no artifact file {path!r}") from None
            raise

    # -- helpers -------------------------------------------------------------------------------
    def _artifact_names(self, job_dir: Path, run: str) -> list[str]:
        root = job_dir / RUNS_DIR / run / ARTIFACTS_DIR
        if not is_real_dir(root):
            return []
        with contextlib.suppress(OSError), os.scandir(root) as entries:
            return sorted(
                e.name for e in entries if _RUN_NAME.fullmatch(e.name) and e.is_dir(follow_symlinks=False)
            )
        return []

    def _ranks(self, job_dir: Path, run: str, record: dict[str, Any]) -> list[int]:
        if record.get("ranks") != "all":
            return []
        root = job_dir / RUNS_DIR / run
        ranks = []
        with contextlib.suppress(OSError), os.scandir(root) as entries:
            for e in entries:
                number = e.name.removeprefix("rank-")
                if e.name.startswith("rank-") and number.isdigit() and e.is_dir(follow_symlinks=False):
                    ranks.append(int(number))
        return sorted(ranks)

    @staticmethod
    def _metrics_parts(run: str, record: dict[str, Any], rank: int | None) -> list[str]:
        if record.get("ranks") == "all":
            return [RUNS_DIR, run, f"rank-{rank or 0}", METRICS_FILE]
        return [RUNS_DIR, run, METRICS_FILE]

    def _progress(self, record: dict[str, Any], tail: _Tail, phase: JobPhase) -> RunProgress:
        total = total_steps(record)
        running = run_status(record, phase) == "running"
        return RunProgress(
            step=tail.step, total_steps=total, eta_seconds=_eta(tail, total) if running else None
        )

    def _catch_up(self, job_dir: Path, parts: list[str]) -> _Tail:
        """The file's tail state, after reading (bounded) what was appended since the last call."""
        key = os.path.join(job_dir, *parts)
        with self._lock:  # one reader at a time per file position (bounded reads: short waits)
            try:
                f = open_beneath(job_dir, parts)
            except (OSError, ValueError):
                self._tails.pop(key, None)
                return _Tail((0, 0))
            with f:
                tail = self._tails.get(key)
                tail = _read_on(f, tail)
            self._tails[key] = tail
            return tail


def _read_on(f: IO[bytes], tail: _Tail | None) -> _Tail:
    """``tail`` advanced over the whole lines appended to ``f`` since, at most CATCH_UP_BYTES."""
    st = os.fstat(f.fileno())
    ident = (st.st_dev, st.st_ino)
    if tail is None or tail.ident != ident or st.st_size < tail.offset:
        tail = _Tail(ident)
    if st.st_size - tail.offset > CATCH_UP_BYTES:  # too far behind: the newest part only
        f.seek(st.st_size - CATCH_UP_BYTES)
        f.readline()  # the rest of a line cut in two
        tail.offset = f.tell()
    f.seek(tail.offset)
    chunk = f.read(min(CATCH_UP_BYTES, st.st_size - tail.offset))
    end = chunk.rfind(b"\n") + 1
    _fold(tail, parse_lines(chunk[:end].split(b"\n")))
    tail.offset += end
    return tail
