"""Polling that backs off while nothing happens.

The launcher and the kernel following a job poll files. Every wake-up takes a little CPU from
the training ranks, and under DDP a rank delayed is every rank delayed, so both poll briskly
only while something is happening and slow down while the job just trains.
"""

from __future__ import annotations

import select
import time
from collections.abc import Sequence


class Backoff:
    """``wait(active)``: no sleep after activity; otherwise a sleep that grows to ``longest``, cut
    short when one of ``wake`` (file descriptors: a pidfd, a socket) becomes readable."""

    def __init__(self, shortest: float, longest: float, factor: float = 1.5) -> None:
        self.shortest = shortest
        self.longest = longest
        self.factor = factor
        self.delay = shortest

    def wait(self, active: bool, wake: Sequence[int] = ()) -> None:
        if active:
            self.delay = self.shortest
            return
        if wake:
            select.select(wake, [], [], self.delay)
        else:
            time.sleep(self.delay)
        self.delay = min(self.longest, self.delay * self.factor)
