"""The job under a ``%%distrun`` cell as text: a terminal's or a script's view (``TextView``),
and the text forms every view shares: a log line as shown, the tail with progress bars
collapsed, the one-line summary, a replica's chip, the root cause's lines, a rank's usage; and
what both views read as the job runs (``UsageFeed``, ``IncidentFeed``).

The widget (``widgets.py``) shows the same words in HTML and keeps this text up to date beside
it, for the front ends that cannot render widgets.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from ..model.errors import DistTrainError
from ..model.failure import first_line
from ..model.specs import JobStatus, LogLine, ReplicaStatus

if TYPE_CHECKING:
    from ..jobs.debug import Prompt
    from ..model.progress import Progress
    from ..payloads.jobs import Failure
    from ..payloads.monitoring import IncidentSummary, Resources, ResourceSample

TAIL_LINES = 20  # log lines kept in the widget (the sidebar log viewer has the rest)

SUMMARY_LINES = 10  # log lines in the plain-text summary

LINE_CHARS = 500  # a root-cause line longer than this is cut in the summary (the log has it all)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")

_TORCH_PREFIX = re.compile(r"^(?:\[rank\d+\]:\s?)+")


class LogTail:
    """The last ``size`` display lines of a job, with progress bars collapsed.

    A chunk whose text ends with ``\\r`` (tqdm) is provisional: the next chunk of the same
    replica replaces it, so a bar that redraws a thousand times takes one line.
    """

    def __init__(self, size: int = TAIL_LINES) -> None:
        self._lines: deque[list[Any]] = deque(maxlen=size)  # [replica, text, pending]

    def add(self, line: LogLine) -> None:
        pending = line.text.endswith("\r")
        text = format_line(line)
        for entry in reversed(self._lines):
            if entry[0] == line.replica:
                if entry[2]:
                    # like a terminal: a bare newline after a bar leaves the bar as drawn
                    if _ANSI.sub("", line.text).strip("\r\n"):
                        entry[1] = text
                    entry[2] = pending
                    return
                break
        self._lines.append([line.replica, text, pending])

    def lines(self) -> list[str]:
        return [entry[1] for entry in self._lines]


def format_line(line: LogLine) -> str:
    """``[rank0] text`` with ANSI codes and line endings removed, last ``\\r`` segment kept (and
    torch's own ``[rank0]:`` prefix, which would say the rank twice)."""
    text = _ANSI.sub("", line.text).rstrip("\r\n")
    text = _TORCH_PREFIX.sub("", text.rsplit("\r", 1)[-1])
    prefix = f"rank{line.rank}" if line.rank is not None else line.replica
    return f"[{prefix}] {text}"


def failure_lines(story: Failure, lines: list[LogLine]) -> list[str]:
    """What the text forms say of the root cause: its error and the cell and line that raised it
    (the cell's error has the traceback, mapped to the cells), or where its log has no traceback,
    its last lines."""
    if story.traceback:
        error = story.headline.removeprefix(f"{story.replica}: ")
        return [f"{story.replica} failed first: {error}"[:LINE_CHARS]]
    shown = [format_line(ln)[:LINE_CHARS] for ln in lines] or ["(no output)"]
    return [f"{story.replica} failed first; its last lines:", *shown]


def chip_text(replica: ReplicaStatus, story: Failure | None) -> str:
    """A replica in the text forms: ``rank-1: Failed, exit 1, Error``, or ``rank-0: stopped by
    rank-1`` when it only stopped because the root cause left (the job layer decides)."""
    cause = story.stopped_by(replica.name) if story else None
    return f"{replica.name}: stopped by {cause}" if cause else f"{replica.name}: {replica_note(replica)}"


def summary(name: str, job_id: str, status: JobStatus | None) -> str:
    """One line about the job: name, id, phase, replicas ready, reason."""
    if status is None:
        return f"distrun {name} ({job_id}): submitted"
    text = f"distrun {name} ({job_id}): {status.phase.value}"
    if not status.is_terminal:  # once it has ended, "0/2 ready" says nothing useful
        text += f", {status.replicas_ready}/{len(status.replicas)} replicas ready"
    if why := reason_text(status):
        text += " - " + why
    return text


def reason_text(status: JobStatus) -> str:
    """``reason: message`` on one line; a message with a traceback gives its first line (the
    rank's own lines are shown under the summary)."""
    return ": ".join(x for x in (status.reason, first_line(status.message)) if x)


def replica_note(replica: ReplicaStatus) -> str:
    parts = [replica.phase.value]
    if replica.exit_code is not None:
        parts.append(f"exit {replica.exit_code}")
    if replica.reason:
        parts.append(replica.reason)
    return ", ".join(parts)


def by_role(replicas: list[ReplicaStatus]) -> list[tuple[str, list[ReplicaStatus]]]:
    """Replicas grouped by role, in the order roles first appear (the launcher's order)."""
    groups: dict[str, list[ReplicaStatus]] = {}
    for replica in replicas:
        groups.setdefault(replica.role, []).append(replica)
    return list(groups.items())


def role_label(role: str, groups: int) -> str:
    """The label before a role's chips: none when the job has one role (all torchrun workers)."""
    return f"{role}:" if groups > 1 else ""


def format_bytes(n: float) -> str:
    """``512 B``, ``12.3 MB``, ``1.50 GB`` (powers of 1024, as the lab extension shows them)."""
    value, unit = max(0.0, float(n)), "B"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            break
        value /= 1024
    digits = 0 if unit == "B" else 2 if value < 10 else 1 if value < 100 else 0
    return f"{value:.{digits}f} {unit}"


def format_percent(percent: float) -> str:
    return f"{percent:.1f}%" if 0 < percent < 10 else f"{round(percent)}%"


def chip_usage(sample: ResourceSample) -> str:
    """A rank's latest sample at a glance: ``CPU 98% · 312 MB`` and, with a GPU, ``· GPU 40% 1.20 GB``."""
    parts = [f"CPU {format_percent(sample.cpu_percent)}", format_bytes(sample.rss_bytes)]
    if sample.gpus:
        util = sum(g.util_percent for g in sample.gpus) / len(sample.gpus)
        used = sample.gpu_mem_bytes
        if used is None:
            used = sum(g.mem_used_bytes for g in sample.gpus)
        parts.append(f"GPU {format_percent(util)} {format_bytes(used)}")
    return " · ".join(parts)


class UsageFeed:
    """The ranks' latest resource samples for the chips, read through the job layer no more often
    than the sampler writes them, each read from the previous answer's ``now`` on.

    A backend that cannot give them (or a failing read) ends the feed: the chips show phases only.
    """

    def __init__(
        self, fetch: Callable[[float | None], Resources], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._fetch = fetch
        self._clock = clock
        self._since: float | None = None
        self._next = 0.0
        self.stopped: str | None = None  # why the feed ended

    def poll(self) -> Resources | None:
        """What is new when a read is due, else None."""
        if self.stopped is not None or self._clock() < self._next:
            return None
        try:
            answer = self._fetch(self._since)
        except DistTrainError as err:
            self.stopped = str(err)
            return None
        self._since = answer.now
        self._next = self._clock() + max(answer.interval, 0.5)
        return answer


class TextView:
    """Plain text for terminals and scripts: phase changes and log lines as they come."""

    def __init__(self, job_id: str, name: str, stream: TextIO | None = None) -> None:
        self.job_id = job_id
        self.name = name
        self._stream = stream
        self._last: str | None = None
        self._status: JobStatus | None = None
        self._pending = False  # a "\r" progress chunk is on screen, not yet ended by "\n"
        self._lock = threading.Lock()

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stdout  # resolved late: IPython swaps sys.stdout per cell

    def update(self, status: JobStatus) -> None:
        with self._lock:
            self._status = status
            text = summary(self.name, self.job_id, status)
            if text != self._last:
                self._last = text
                self._write(text + "\n")

    def append(self, lines: list[LogLine]) -> None:
        with self._lock:
            interactive = self.stream.isatty()
            for line in lines:
                if line.text.endswith("\r"):
                    # Only a terminal can redraw a line; elsewhere the bar would pile up.
                    if interactive:
                        self._write("\r" + format_line(line))
                        self._pending = True
                    continue
                self._write(("\r" if self._pending else "") + format_line(line) + "\n")

    def failure(self, story: Failure, lines: list[LogLine]) -> None:
        # Its lines went by interleaved with its peers'; say them again together, last.
        with self._lock:
            self._write(("\n" if self._pending else "") + "\n".join(failure_lines(story, lines)) + "\n")

    def usage(self, resources: Resources) -> None:
        """Not printed: a line of numbers every two seconds would bury the job's own output."""

    def progress(self, found: Progress | None, shown: str) -> None:
        """Not printed: the job's own bar (tqdm's) is in its output already."""

    def diagnosis(self, incident: IncidentSummary) -> None:
        with self._lock:
            self._write(
                ("\n" if self._pending else "") + f"diagnosis ({incident.trigger}): {incident.verdict}\n"
            )

    def prompt(self, replica: str, prompt: Prompt | None, transcript: str) -> None:
        """A prompt opening: the other ranks wait for it (its transcript is printed as it goes)."""
        if prompt is not None and not transcript:
            with self._lock:
                self._write(
                    ("\n" if self._pending else "") + f"{replica} waits in the debugger at {prompt.where}; "
                    "the other ranks wait for it\n"
                )

    def close(self) -> None:
        with self._lock:
            if self._pending:
                self._write("\n")
            self.stream.flush()

    def _write(self, text: str) -> None:
        self._pending = self._pending and not text.endswith("\n")
        self.stream.write(text)
        self.stream.flush()


class IncidentFeed:
    """The job's newest diagnosis, once per new one, read no more often than every ``every`` s."""

    def __init__(self, fetch: Callable[[], list[IncidentSummary]], every: float = 2.0) -> None:
        self._fetch, self._every = fetch, every
        self._next, self._seen = 0.0, ""

    def poll(self) -> IncidentSummary | None:
        if time.monotonic() < self._next:
            return None
        self._next = time.monotonic() + self._every
        try:
            newest = next(iter(self._fetch()), None)
        except (OSError, DistTrainError):
            return None
        if newest is None or newest.name == self._seen:
            return None
        self._seen = newest.name
        return newest
