"""Where logged points wait: ``put`` is an append to a deque (no lock, no I/O), and a background
thread writes them to ``metrics.jsonl`` and TensorBoard every second, or sooner when many wait.

Memory is bounded: past ``MAX_PENDING`` waiting points, ``put`` writes them itself (a loop
logging faster than a disk takes it slows down instead of growing without end).
"""

from __future__ import annotations

import collections
import logging
import threading
from pathlib import Path
from typing import Any

from .files import append_lines
from .tb import TensorBoard

log = logging.getLogger(__name__)

INTERVAL = 1.0  # seconds between background writes
WAKE_AT = 5_000  # waiting points that wake the writer early
MAX_PENDING = 200_000

# A point: its JSONL record, and (tag, value, step, wall time) for TensorBoard.
Point = tuple[dict[str, Any], tuple[str, float, int, float]]


class Sink:
    def __init__(self, path: Path, tensorboard: TensorBoard | None) -> None:
        self.path = path
        self._tb = tensorboard
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
        with self._lock:
            points = []
            while self._pending:  # popleft one by one: put() may append meanwhile
                points.append(self._pending.popleft())
            if not points:
                return
            try:
                append_lines(self.path, (record for record, _ in points))
                if self._tb is not None:
                    self._tb.scalars(scalar for _, scalar in points)
                    self._tb.flush()
            except Exception as exc:  # never kill training for a metric: say it once
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
