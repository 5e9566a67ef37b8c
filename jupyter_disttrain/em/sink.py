"""Where logged points wait: ``put`` is an append to a deque (no lock, no I/O), and a background
thread appends them to ``metrics.jsonl`` every second, or sooner when many wait.

Memory is bounded: past ``MAX_PENDING`` waiting points, ``put`` writes them itself (a loop
logging faster than a disk takes it slows down instead of growing without end).
"""

from __future__ import annotations

import collections
import logging
import math
import threading
from pathlib import Path

from . import exits
from .files import append_text

log = logging.getLogger(__name__)

INTERVAL = 1.0  # seconds between background writes
WAKE_AT = 5_000  # waiting points that wake the writer early
MAX_PENDING = 200_000

# A point as log() leaves it, formatted only here: (type, name, value, step, epoch, time, backwards).
Point = tuple[str, str, float, int | None, int | None, float, bool]


def _json(value: float | int | None) -> str:
    if value is None:
        return "null"
    if isinstance(value, int) or math.isfinite(value):
        return repr(value)
    # JSON has no NaN or infinity: kept as the strings Python's float() reads back.
    return '"NaN"' if math.isnan(value) else ('"Infinity"' if value > 0 else '"-Infinity"')


def line(point: Point) -> str:
    """One JSON object. Types and names are checked words (no quoting needed), so this is a
    format string instead of json.dumps: a third of the cost, in the thread that shares the GIL."""
    type_, name, value, step, epoch, when, backwards = point
    flag = ',"step_backwards":true' if backwards else ""
    return (
        f'{{"type":"{type_}","name":"{name}","value":{_json(value)},"step":{_json(step)},'
        f'"epoch":{_json(epoch)},"time":{when!r}{flag}}}\n'
    )


class Sink:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._pending: collections.deque[Point] = collections.deque()
        # Reentrant: SIGTERM's flush may interrupt the main thread inside a flush of its own.
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._closed = False
        self._failed = False
        self._thread = threading.Thread(target=self._loop, name=f"em-writer:{path.parent.name}", daemon=True)
        self._thread.start()

    def put(self, point: Point) -> None:
        self._pending.append(point)
        waiting = len(self._pending)
        if waiting >= MAX_PENDING:
            self.flush()
        elif waiting >= WAKE_AT:
            self._wake.set()

    def flush(self) -> None:
        """Write every waiting point; safe from any thread and from a signal handler."""
        with self._lock, exits.writing():
            lines = []
            while self._pending:  # popleft one by one: put() may append meanwhile
                lines.append(line(self._pending.popleft()))
            if not lines:
                return
            try:
                append_text(self.path, "".join(lines))
            except OSError as exc:  # never kill training for a metric: say it once
                if not self._failed:
                    log.error("em: could not write metrics to %s: %s", self.path, exc)
                self._failed = True

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self.flush()

    def _loop(self) -> None:
        while not self._closed:
            self._wake.wait(INTERVAL)
            self._wake.clear()
            self.flush()
