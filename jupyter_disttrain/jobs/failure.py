"""A failed job's story for every front end: the root-cause rank's traceback mapped to cells.

The job layer reads what ``tracebacks`` needs (the root-cause replica's last log lines through
its backend, bounded in lines and bytes; the script; the packaging's line map) and makes the
``Failure`` the details (REST, the lab extension) and the cell's error show. Stack dumps of a
running rank are mapped the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import tracebacks
from ..model.errors import DistTrainError
from ..model.failure import first_line, root_cause, stopped_by_peer
from ..model.specs import JobPhase, JobStatus
from ..payloads.jobs import Failure
from ..payloads.monitoring import StackDump
from ..storage.logfiles import Budget, take_lines

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..storage.store import JobRecord, JobStore

TAIL_LINES = 400  # of the root-cause rank's log searched for its traceback
TAIL_BYTES = 128 * 1024
PEER_LINES = 200  # of a stopped peer's log searched for a traceback of its own
PEER_BYTES = 16 * 1024
PEERS_READ = 16


def line_map(store: JobStore, record: JobRecord) -> tracebacks.LineMap:
    """The job's script and its line map (nothing maps where either cannot be read)."""
    from ..monitoring.verdict import line_map as read_line_map

    try:
        job_dir = store.job_dir(record.id)
    except (OSError, DistTrainError):
        return tracebacks.LineMap.of(record.spec.entrypoint, "", None)
    return read_line_map(job_dir, record.spec.entrypoint)


def failure_of(store: JobStore, backend: Backend, record: JobRecord, status: JobStatus) -> Failure | None:
    """Why the job failed (None unless it did): its root cause's traceback mapped to cells, and
    the replicas that only stopped because it left."""
    if status.phase is not JobPhase.FAILED:
        return None
    cause = root_cause(status)
    headline = first_line(status.message) or status.reason or "failed"
    if cause is None:
        return Failure("", headline, None, None, None, "", "", [])
    tb = _traceback(backend, record, cause.name, TAIL_LINES, TAIL_BYTES)
    peers = _stopped_by_peer(backend, record, status)
    if tb is None:
        return Failure(cause.name, headline, None, None, None, "", "", peers)
    tracebacks.map_frames(tb, line_map(store, record))
    frame = tb.user_frame()
    return Failure(
        replica=cause.name,
        headline=f"{cause.name}: {tracebacks.headline(tb)}",
        exception=tb.last.exception or None,
        cell=frame.cell if frame else None,
        line=frame.cell_line if frame else None,
        traceback="\n".join(tracebacks.render(tb)),
        raw="\n".join(tb.raw),
        stopped_by_peer=peers,
        message=tb.last.message if tb.last.exception else None,
    )


def _traceback(
    backend: Backend, record: JobRecord, replica: str, lines: int, size: int
) -> tracebacks.Traceback | None:
    """The last traceback in the last ``lines`` lines (``size`` bytes) of ``replica``'s log."""
    try:
        tail = take_lines(
            backend.logs(record.id, replica, follow=False, tail=lines, budget=Budget(size)), lines
        )
    except (OSError, DistTrainError):
        return None
    return tracebacks.read_traceback([line.text for line in tail])


def _stopped_by_peer(backend: Backend, record: JobRecord, status: JobStatus) -> list[str]:
    """The replicas ``failure.stopped_by_peer`` names by time, less those whose log ends in a
    traceback of an error of their own: two ranks raising the same error ms apart each failed
    (a stopped rank prints nothing, or an error of losing its peer). Past ``PEERS_READ`` of
    them, time alone decides: a detail read stays bounded however many ranks a job has."""
    named = stopped_by_peer(status)
    return [
        name
        for i, name in enumerate(named)
        if i >= PEERS_READ
        or (tb := _traceback(backend, record, name, PEER_LINES, PEER_BYTES)) is None
        or tracebacks.lost_peer(tb)
    ]


def mapped_stack(store: JobStore, record: JobRecord, dump: StackDump) -> StackDump:
    """``dump`` with the script's lines named by their cells and the product's frames folded;
    the dump as taken stays in ``raw``."""
    text = tracebacks.map_stack(dump.text, line_map(store, record))
    return StackDump(dump.replica, dump.method, text, dump.note, dump.text)
