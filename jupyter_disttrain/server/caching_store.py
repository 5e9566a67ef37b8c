"""A job store for the long-lived server: each ``job.json`` is parsed once per version.

The server lists every job on each poll of the UI, and the backend interface reads a job's
record several times per listing. Records change rarely (written at submit, now and then a
backend adds to ``backend_state``), so they are cached against the file's identity (inode,
mtime, size): every write goes through an atomic rename, which changes it, so a cached
record is never stale. ``status.json`` is cached the same way: each read still sees the
latest state written, at the cost of one ``stat`` instead of a parse.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TypeVar

from ..model.errors import UnknownJobError
from ..model.specs import JobStatus, validate_job_id
from ..storage.store import JobRecord, JobStore, checked_record, read_json, read_status_file


class CachingJobStore(JobStore):
    """``JobStore`` with parsed records kept in memory while their file is unchanged."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        also: Callable[[], Sequence[Path]] | None = None,
    ) -> None:
        super().__init__(root, also=also)
        self._records: dict[str, tuple[tuple[int, int, int], JobRecord]] = {}
        self._statuses: dict[str, tuple[tuple[int, int, int], JobStatus]] = {}

    def read_record(self, job_id: str) -> JobRecord:
        path = os.path.join(self.existing_dir(job_id), "job.json")  # no link, in a root
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            raise UnknownJobError(job_id, self.roots()) from None
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        hit = self._records.get(job_id)
        if hit is not None and hit[0] == key:
            record = hit[1]
        else:
            # Replaced between stat and read? Then the next stat differs and it is read again.
            record = checked_record(read_json(Path(path)), job_id, os.path.dirname(path))
            self._records[job_id] = (key, record)
        # Callers may add to backend_state before writing the record back: give them their own.
        mine = _shallow(record)
        mine.backend_state = dict(record.backend_state)
        return mine

    def read_status(self, job_id: str) -> JobStatus | None:
        validate_job_id(job_id)
        job_dir = self._locate(job_id)
        path = os.path.join(job_dir, "status.json")
        try:
            st = os.stat(path)
        except FileNotFoundError:
            if not os.path.isfile(os.path.join(job_dir, "job.json")):
                raise UnknownJobError(job_id, self.roots()) from None
            return None
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        hit = self._statuses.get(job_id)
        if hit is not None and hit[0] == key:
            return _copy_status(hit[1])
        status = read_status_file(Path(path))
        if status is None:
            return None
        self._statuses[job_id] = (key, status)
        return _copy_status(status)

    def records(self, include_deleted: bool = False) -> list[JobRecord]:
        out = super().records(include_deleted)
        if not include_deleted:
            self._forget_all_but({r.id for r in out})
        return out

    def fingerprints(self) -> dict[str, tuple[int, ...]]:
        out = super().fingerprints()
        self._forget_all_but(out.keys())
        return out

    def _forget_all_but(self, listed: Collection[str]) -> None:
        """Drop purged jobs (deleted ones are kept: they are still readable by id)."""
        # list() copies the keys in one step: other worker threads may be adding to it.
        for job_id in [j for j in list(self._records) if j not in listed]:
            if not os.path.isdir(self._locate(job_id)):
                self._records.pop(job_id, None)
                self._statuses.pop(job_id, None)

    def purge(self, job_id: str) -> None:
        super().purge(job_id)
        self._records.pop(job_id, None)
        self._statuses.pop(job_id, None)


def _copy_status(status: JobStatus) -> JobStatus:
    """An independent copy (backends update statuses in place before writing them)."""
    out = _shallow(status)
    out.replicas = [_shallow(r) for r in status.replicas]
    out.conditions = [_shallow(c) for c in status.conditions]
    out.events = [_shallow(e) for e in status.events]
    return out


_D = TypeVar("_D")


def _shallow(obj: _D) -> _D:
    """``copy.copy`` of a plain dataclass instance, without its generic (and slow) protocol:
    listing 1,000 jobs makes thousands of these."""
    out = object.__new__(type(obj))
    out.__dict__.update(obj.__dict__)
    return out
