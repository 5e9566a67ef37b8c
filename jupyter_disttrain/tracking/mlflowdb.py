"""MLflow's runs of a job, read from the SQLite tracking database the job's ranks record into
(``MLFLOW_TRACKING_URI=sqlite:///<job dir>/mlflow.db``, set by ``launch.rank_env``).

Read-only (``mode=ro``: never a write, never a lock held past one query), without MLflow itself
(the server need not have it), each query bounded by ``LIMIT``; a database that is locked, being
created, or not MLflow's reads as no runs. The tables read (``runs``, ``params``,
``latest_metrics``, ``metrics``) have had these columns since MLflow 1.x. SQLite keeps whatever a
writer puts in a column (NULL, text where a number belongs, a time no datetime holds): every
value is converted through the guards below (a BLOB where text belongs is read as UTF-8 with
replacement characters), and a point without a number is left out.
"""

from __future__ import annotations

import contextlib
import math
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..payloads.runs import MetricValue, RunPoint
from ..runtime.contract import MLFLOW_DB, RUN_NAME_PATTERN
from ..storage.safefiles import is_real_file

PREFIX = "_mlflow."  # an MLflow run's name in the runs table: never one of em's (they start alnum)
MAX_RUNS = 200
MAX_KEYS = 1000  # params or metrics of one run
_NAME = re.compile(RUN_NAME_PATTERN)
_STATUS = {"RUNNING": "running", "SCHEDULED": "running", "FINISHED": "finished"}  # else failed


@dataclass
class MlflowRun:
    uuid: str
    name: str  # as the runs table shows it: PREFIX + the run's name, or its id when not unique
    status: str
    params: dict[str, Any]
    metrics: dict[str, MetricValue]
    step: int | None  # the highest of the metrics' last steps
    start_time: str | None
    end_time: str | None


@dataclass(frozen=True)
class MetricRow:
    """One ``log_metric`` point, of any run."""

    row: int  # SQLite's rowid: grows with each insert
    uuid: str
    key: str
    value: float | None  # None: the row holds no number (the follower skips it)
    step: int
    time: float  # seconds since the epoch


def db_path(job_dir: Path) -> Path:
    return job_dir / MLFLOW_DB


@contextlib.contextmanager
def _connect(job_dir: Path) -> Iterator[sqlite3.Connection | None]:
    path = db_path(job_dir)
    if not is_real_file(path):  # none yet, or a link planted to make us read another database
        yield None
        return
    try:
        con = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=0.5)
    except sqlite3.Error:
        yield None
        return
    try:
        yield con
    finally:
        con.close()


def _text(value: Any) -> str:
    """A column's text: a BLOB decoded (undecodable bytes replaced), NULL empty, else ``str``."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def _number(value: Any) -> float | None:
    """A column's number, or None for NULL, text or a blob."""
    return float(value) if isinstance(value, (int, float)) else None


def _seconds(ms: Any) -> float:
    """A timestamp in milliseconds as seconds since the epoch; 0.0 when it is not a finite number."""
    number = _number(ms)
    return number / 1000 if number is not None and math.isfinite(number) else 0.0


def _iso(ms: Any) -> str | None:
    if not isinstance(ms, int):
        return None
    try:
        when = datetime.fromtimestamp(ms / 1000, timezone.utc)
    except (OverflowError, OSError, ValueError):  # beyond what a datetime holds
        return None
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _value(value: Any, is_nan: Any) -> MetricValue | None:
    if _number(is_nan):  # MLflow writes 0 or 1; text or a blob there says nothing
        return "NaN"
    number = _number(value)
    if number is None:  # no number in the row
        return None
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    return number


def _param(value: Any) -> Any:
    """MLflow keeps params as text: numbers are shown as numbers again (NULL stays None)."""
    if value is None:
        return None
    text = _text(value)
    for kind in (int, float):
        try:
            return kind(text)
        except (TypeError, ValueError):
            pass
    return text


def runs(job_dir: Path) -> list[MlflowRun]:
    """The job's MLflow runs (not deleted), oldest first, with params and each metric's last value."""
    with _connect(job_dir) as con:
        if con is None:
            return []
        try:
            return _read_runs(con)
        except (sqlite3.Error, ValueError, TypeError):  # locked, half-made, or not MLflow's
            return []


def _read_runs(con: sqlite3.Connection) -> list[MlflowRun]:
    rows = con.execute(
        "SELECT run_uuid, name, status, start_time, end_time FROM runs"
        " WHERE lifecycle_stage = 'active' ORDER BY start_time LIMIT ?",
        (MAX_RUNS,),
    ).fetchall()
    names = [_text(r[1]) for r in rows]
    out = []
    for (uuid, _, status, start, end), name in zip(rows, names, strict=True):
        unique = bool(name) and names.count(name) == 1 and _NAME.fullmatch(name)
        params = con.execute("SELECT key, value FROM params WHERE run_uuid = ? LIMIT ?", (uuid, MAX_KEYS))
        latest = con.execute(
            "SELECT key, value, is_nan, step FROM latest_metrics WHERE run_uuid = ? LIMIT ?", (uuid, MAX_KEYS)
        ).fetchall()
        out.append(
            MlflowRun(
                uuid=_text(uuid),
                name=PREFIX + (name if unique else _text(uuid)),
                status=_STATUS.get(_text(status), "failed"),
                start_time=_iso(start),
                end_time=_iso(end),
                params={_text(k): _param(v) for k, v in params},
                metrics={_text(k): v for k, v in _latest(latest)},
                step=max((s for *_, s in latest if isinstance(s, int)), default=None),
            )
        )
    return out


def _latest(rows: list[Any]) -> Iterator[tuple[Any, MetricValue]]:
    for key, value, nan, _ in rows:
        number = _value(value, nan)
        if number is not None:
            yield key, number


def find(job_dir: Path, name: str) -> MlflowRun | None:
    return next((r for r in runs(job_dir) if name in (r.name, PREFIX + r.uuid)), None)


def _rows(job_dir: Path, query: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """A query's rows, none when the database is missing, locked or not MLflow's."""
    with _connect(job_dir) as con:
        if con is None:
            return []
        try:
            return con.execute(query, args).fetchall()
        except sqlite3.Error:
            return []


def metric_rows(job_dir: Path, since: int, limit: int) -> list[MetricRow]:
    """Up to ``limit`` metric points of every run after row ``since`` (SQLite's rowid), in order."""
    rows = _rows(
        job_dir,
        "SELECT rowid, run_uuid, key, value, is_nan, step, timestamp FROM metrics"
        " WHERE rowid > ? ORDER BY rowid LIMIT ?",
        (since, limit),
    )
    return [
        MetricRow(
            row=row,
            uuid=_text(uuid),
            key=_text(key),
            value=float("nan") if _number(nan) else _number(value),
            step=step if isinstance(step, int) else 0,
            time=_seconds(ts),
        )
        for row, uuid, key, value, nan, step, ts in rows
    ]


def points(job_dir: Path, uuid: str, since: int, limit: int) -> tuple[list[RunPoint], int, bool]:
    """Up to ``limit`` metric points of run ``uuid`` after row ``since`` (SQLite's rowid, which grows
    with each insert): (points, the last row read, more)."""
    rows = _rows(
        job_dir,
        "SELECT rowid, key, value, is_nan, step, timestamp FROM metrics"
        " WHERE run_uuid = ? AND rowid > ? ORDER BY rowid LIMIT ?",
        (uuid, since, limit + 1),
    )
    more = len(rows) > limit
    rows = rows[:limit]
    out = [
        RunPoint(
            type="mlflow",
            name=_text(key),
            value=number,
            step=step if isinstance(step, int) else None,
            epoch=None,
            time=_seconds(ts),
            flags=[],
        )
        for _, key, value, nan, step, ts in rows
        if (number := _value(value, nan)) is not None
    ]
    return out, (rows[-1][0] if rows else since), more
