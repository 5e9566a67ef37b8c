"""Reading a job's output, a part of every backend: ``logs`` follows it, ``log_runs`` reads it in bulk.

By default the output is the log files of the job dir (``_log_sources``); a backend whose ranks
log elsewhere (a cluster's own log API) overrides ``_streamed_logs``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..model.errors import InvalidSpecError
from ..model.specs import LogLine, LogRun
from ..storage.logfiles import Budget, LogSource, group_runs, log_files, read_lines, read_runs

if TYPE_CHECKING:
    from ..model.specs import JobStatus
    from ..storage.store import JobRecord, JobStore


@dataclass(frozen=True)
class LogQuery:
    """What a reader asks of a job's output, as ``logs`` takes it: one replica or all, where to
    start (``tail`` lines, or after the line that carried ``offset``), whether to follow, and how
    many bytes at most."""

    replica: str | None = None
    follow: bool = False
    tail: int | None = None
    offset: str | int | None = None
    budget: Budget | None = None


class LogAccess:
    """``logs`` and ``log_runs`` over the job store, as every backend offers them."""

    if TYPE_CHECKING:  # the Backend's
        store: JobStore

        def describe(self, job_id: str) -> JobStatus: ...

    def logs(
        self,
        job_id: str,
        replica: str | None = None,
        *,
        follow: bool = False,
        tail: int | None = None,
        offset: str | int | None = None,
        budget: Budget | None = None,
    ) -> Iterator[LogLine]:
        """Lines of output, one replica or all interleaved.

        ``tail`` starts at the last N lines (of each replica); ``offset`` resumes after the
        line that carried it. With ``follow`` the iterator waits for new lines and ends once
        the job has ended and all its output has been read. With a ``budget`` it ends once
        that many bytes were read (``budget.hit`` then says more is there).
        """
        record = self.store.read_record(job_id)
        query = LogQuery(replica=replica, follow=follow, tail=tail, offset=offset, budget=budget)
        streamed = self._streamed_logs(record, query)
        if streamed is not None:
            return streamed
        self._check_replica(record, replica, self._log_sources(record))

        def done() -> bool:
            return self.describe(job_id).is_terminal

        return read_lines(
            lambda: self._log_sources(record),
            offset=offset,
            tail=tail,
            follow=follow,
            is_done=done,
            replica=replica,
            budget=budget,
        )

    def log_runs(
        self,
        job_id: str,
        replica: str | None = None,
        *,
        tail: int | None = None,
        offset: str | int | None = None,
        max_lines: int = 5000,
        final: bool = True,
        budget: Budget | None = None,
    ) -> list[LogRun]:
        """Up to ``max_lines`` of the output there is now (and at most ``budget`` bytes), in
        runs of consecutive lines.

        The same lines and resume tokens as ``logs`` without ``follow``, read in bulk: what a
        poller (the server's log stream) calls. ``final``: the job has ended, so a last line
        without a newline is complete (pass the status read *before* this call).
        """
        record = self.store.read_record(job_id)
        bulk = budget or Budget()  # a bulk read is bounded in bytes even when the caller set no budget
        query = LogQuery(replica=replica, tail=tail, offset=offset, budget=bulk)
        streamed = self._streamed_logs(record, query)
        if streamed is not None:
            return group_runs(streamed, max_lines)
        sources = self._log_sources(record)
        self._check_replica(record, replica, sources)
        return read_runs(
            sources,
            offset=offset,
            tail=tail,
            replica=replica,
            max_lines=max_lines,
            final=final,
            budget=budget,
        )

    def _streamed_logs(self, record: JobRecord, query: LogQuery) -> Iterator[LogLine] | None:
        """Hook: the job's output when it is not in log files of the job dir (a cluster's own
        log API); None, the default, reads ``_log_sources``."""
        return None

    def _check_replica(self, record: JobRecord, replica: str | None, sources: list[LogSource]) -> None:
        if replica is not None:
            known = {r.name for r in self.describe(record.id).replicas}
            known.update(s.replica for s in sources)
            if replica not in known:
                have = ", ".join(sorted(known)) or "none yet"
                raise InvalidSpecError(f"job {record.id} has no replica {replica!r}; it has: {have}")

    def _log_sources(self, record: JobRecord) -> list[LogSource]:
        return [LogSource(p.stem, p) for p in log_files(self.store.logs_dir(record.id))]
