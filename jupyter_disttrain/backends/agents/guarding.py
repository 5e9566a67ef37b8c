"""The stall and idle guard of a job, run by its launcher (local and Slurm jobs).

The launcher outlives the kernel and needs no server, so a job is guarded whatever is open. A
thread of its own looks every ``GuardSettings.tick`` seconds at what the job's files and sockets
say: progress (``em`` and TensorBoard writes, the tqdm bar in rank 0's log, the collectives the
ranks of this machine completed) and the resource samples in ``metrics/`` (read as they are
appended), and asks ``monitoring.guard`` for its judgement. The supervisor's run loop takes what
it says (events, and a cancel when that is the job's action); a diagnosis is made here, so the
run loop never waits on a rank's socket.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...model.progress import last_bar
from ...monitoring import guard, incidents
from ...monitoring.resources import progress_times
from ...payloads.monitoring import GuardState
from ...runtime import contract, debugsock
from ...runtime.sampler import parse_samples
from ...storage.logfiles import last_lines

BAR_LINES = 20  # of rank 0's log searched for the bar's last redraw
BAR_BYTES = 16 * 1024
_READ = 256 * 1024  # bytes of a series read per look, at most

Event = tuple[str, str, str]  # (kind, reason, message) for the job's status


class SeriesReader:
    """The samples appended to a replica's series since the last read (from the file's last
    32 KiB the first time, and again once compaction rewrote it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.inode = -1
        self.offset = 0

    def new(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                info = os.fstat(f.fileno())
                if info.st_ino != self.inode or info.st_size < self.offset:
                    self.inode, self.offset = info.st_ino, max(0, info.st_size - 32 * 1024)
                    f.seek(self.offset)
                    data = f.read(_READ)
                    skip = data.find(b"\n") + 1 if self.offset else 0
                else:
                    f.seek(self.offset)
                    data, skip = f.read(_READ), 0
        except OSError:
            return []
        end = data.rfind(b"\n") + 1  # a line being written is read next time
        self.offset += end
        return parse_samples(data[skip:end])


class GuardThread(threading.Thread):
    """One job's guard in its launcher: a daemon thread that looks every ``settings.tick``
    seconds until ``stop`` (started only when the job's guard is not off)."""

    def __init__(
        self,
        job_dir: Path,
        job_id: str,
        script: str,
        settings: guard.GuardSettings,
        running: Callable[[], dict[str, int]],
        interval: float,
        read_ranks: Callable[[list[str]], incidents.Answers] | None = None,
    ) -> None:
        super().__init__(name="disttrain-guard", daemon=True)
        self.job_dir, self.job_id, self.script = job_dir, job_id, script
        self.settings = settings
        self._running = running  # name -> pid of the replicas running now
        # how a diagnosis reads the ranks (this machine's; a Slurm job's other nodes through srun)
        self.read_ranks = read_ranks or (lambda names: incidents.collect_here(job_dir, job_id, names))
        self.guard = guard.Guard(settings, time.time(), interval or 2.0)
        self.events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self.cancel_reason: str | None = None  # set when the guard cancels the job
        self.preparing: Callable[[], bool] = lambda: False
        self._series: dict[str, SeriesReader] = {}
        self._stopped = threading.Event()

    def start(self) -> None:
        if self.settings.action != "off":
            super().start()

    def stop(self) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join(timeout=10)

    def drain(self) -> list[Event]:
        out = []
        with contextlib.suppress(queue.Empty):
            while True:
                out.append(self.events.get_nowait())
        return out

    def run(self) -> None:
        while not self._stopped.wait(self.settings.tick):
            try:
                self.look()
            except Exception as exc:  # the guard, not the job: say it once and stop guarding
                self.events.put(("Warning", "GuardStopped", f"the stall and idle guard stopped: {exc}"))
                return

    def look(self, now: float | None = None) -> GuardState | None:
        """One look at the job; the new state when it just turned stalled or idle."""
        now = time.time() if now is None else now
        running = self._running()
        self.guard.forget(set(self.guard.idle) - set(running))
        if not running:
            return None
        if self.preparing():  # compiling ops, downloading: no step can be expected yet
            self.guard.stall.see(("preparing", now), now)
        self.guard.see_progress(self.progress(sorted(running)), now)
        for name in running:
            reader = self._series.setdefault(
                name, SeriesReader(self.job_dir / contract.METRICS_DIR / contract.metrics_file(name))
            )
            self.guard.add_samples(name, reader.new())
        before = self.guard.state
        state = self.guard.judge(now)
        if state is not None:
            self._act(state)
        elif before is not None and self.guard.state is None:
            guard.write_state(self.job_dir, None)
            self.events.put(("Normal", "Resumed", f"no longer {before.state}: progress or use again"))
        return state

    def progress(self, replicas: list[str]) -> tuple[Any, ...]:
        """What moves while the job progresses: its newest em or TensorBoard write, the step of
        rank 0's tqdm bar, and the collectives its ranks on this machine completed."""
        written = max(progress_times(self.job_dir).values(), default=None)
        log = self.job_dir / contract.LOGS_DIR / contract.log_file(replicas[0])
        bar = last_bar(last_lines(log, BAR_LINES, BAR_BYTES))
        return (written, bar.step if bar else None, self._collectives(replicas))

    def _collectives(self, replicas: list[str]) -> int | None:
        answers = debugsock.collect(str(self.job_dir), debugsock.TIMEOUT, replicas, stacks=False)
        done = [
            int(status.get("last_completed_collective", 0))
            for answer in answers.values()
            for status in ((answer.get("fr") or {}).get("pg_status") or {}).values()
            if isinstance(status, dict)
            and str(status.get("last_completed_collective", "")).lstrip("-").isdigit()
        ]
        return sum(done) if done else None

    def _act(self, state: GuardState) -> None:
        reason = "Stalled" if state.state == "stalled" else "Idle"
        guard.write_state(self.job_dir, state)
        self.events.put(("Warning", reason, f"{state.message} (guard: {state.action})"))
        if state.action in ("diagnose", "cancel"):
            try:
                names = sorted(self._running())
                incident = incidents.make(
                    self.job_dir,
                    self.job_id,
                    self.script,
                    names,
                    self.read_ranks(names),
                    state.state,
                    time.monotonic(),
                )
            except Exception as exc:  # the diagnosis could not be made: the rest still happens
                self.events.put(("Warning", "DiagnosisFailed", f"could not diagnose: {exc}"))
            else:
                state.incident = incident.name
                guard.write_state(self.job_dir, state)
                self.events.put(("Warning", "Diagnosed", incident.verdict))
        if state.action == "cancel":
            self.cancel_reason = f"cancelled by the guard ({state.message})"
