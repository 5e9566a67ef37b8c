"""A job's logs for every front end: a page of its lines, and one step of following it.

``JobManager`` makes one ``JobLogs`` over its backends (``manager.logs``). Every
read is bounded: at most ``limit`` lines and ``ANSWER_BYTES`` of them a page; and every follower
(the cell, ``logs -f``, ``run``, the log stream) steps through ``follow``, which reads the status
*before* the lines, so output written before the end is never missed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..model.errors import InvalidSpecError
from ..model.specs import JobStatus, LogLine, validate_job_id
from ..payloads.jobs import LogPage, LogRunsPage
from ..storage.logfiles import Budget, take_lines
from .intake import MAX_LOG_LIMIT, validate_replica

if TYPE_CHECKING:
    from ..backends.base import Backend


@dataclass(frozen=True)
class FollowPage:
    """One step of following a job (``JobLogs.follow``): its status, read before the lines,
    and a page of the lines written since the last step."""

    status: JobStatus
    page: LogRunsPage

    @property
    def done(self) -> bool:
        """The job has ended and every line of it was read."""
        return self.page.done

    def lines(self) -> list[LogLine]:
        """The page's lines, to show: each carries its run's resume token (resume from
        ``page.offset``)."""
        return [
            LogLine(text, run.replica, run.offset, run.rank) for run in self.page.runs for text in run.lines
        ]


class JobLogs:
    """The logs of the jobs of every backend (``backend_of``: a job's backend, by its id)."""

    def __init__(self, backend_of: Callable[[str], Backend]) -> None:
        self._backend_of = backend_of

    def page(
        self,
        job_id: str,
        replica: str | None = None,
        offset: str | None = None,
        tail: int | None = None,
        limit: int = 1000,
    ) -> LogPage:
        """Up to ``limit`` lines from ``offset`` (or the last ``tail`` lines), never a whole file
        and never more than ``ANSWER_BYTES`` of it; ``done`` once the job has ended and every
        line was returned."""
        backend, replica, status = self._reader(job_id, replica, tail, limit)
        ended = status.is_terminal
        budget = Budget()
        lines = take_lines(
            backend.logs(job_id, replica, follow=False, tail=tail, offset=offset or None, budget=budget),
            limit,
        )
        more = len(lines) == limit or budget.hit
        return LogPage(lines, lines[-1].offset if lines else (offset or ""), ended and not more, more)

    def follow(
        self,
        job_id: str,
        offset: str | None = None,
        *,
        replica: str | None = None,
        tail: int | None = None,
        limit: int = 5000,
    ) -> FollowPage:
        """One step of following a job: its status, then up to ``limit`` lines (in runs of one
        replica) from ``offset`` or the last ``tail`` lines, at most ``ANSWER_BYTES`` of them.

        Every follower (the cell, ``logs -f``, ``run``, the log stream) steps through this, so the
        status is always read *before* the lines: output written before the end is never missed,
        and ``done`` (the job has ended and every line was read) is never early."""
        backend, replica, status = self._reader(job_id, replica, tail, limit)
        ended = status.is_terminal
        budget = Budget()
        runs = backend.log_runs(
            job_id, replica, tail=tail, offset=offset or None, max_lines=limit, final=ended, budget=budget
        )
        count = sum(len(run.lines) for run in runs)
        more = count >= limit or budget.hit
        token = runs[-1].offset if runs else (offset or "")
        return FollowPage(status, LogRunsPage(runs, token, ended and not more, count, more))

    def _reader(
        self, job_id: str, replica: str | None, tail: int | None, limit: int
    ) -> tuple[Backend, str | None, JobStatus]:
        """Check a log read's arguments; the job's backend, the replica, and the job's status,
        read *before* the lines so that output written before the end is never missed."""
        validate_job_id(job_id)
        replica = validate_replica(replica)
        if tail is not None and tail < 1:
            raise InvalidSpecError("tail must be 1 or more; to get only new lines, pass the last offset")
        if not 1 <= limit <= MAX_LOG_LIMIT:
            raise InvalidSpecError(f"limit must be between 1 and {MAX_LOG_LIMIT}")
        backend = self._backend_of(job_id)
        return backend, replica, backend.describe(job_id)
