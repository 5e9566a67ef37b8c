"""What the REST API does with jobs, without tornado: list, describe, submit, logs, delete.

Every method is blocking (files, cluster calls) and is meant to run in a worker thread. The
answers are plain JSON-ready dicts in the shapes documented in ``docs/rest-api.md``.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import types
import typing
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backends import get_backend
from ..errors import DistTrainError, InvalidSpecError
from ..logfiles import Budget, take_lines
from ..payloads import JobDetail, JobScript, JobSummary, LogPage, LogRunsPage, to_json
from ..specs import JobSpec, JobStatus, Volume, validate_grace_period, validate_job_id

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..store import JobRecord, JobStore

log = logging.getLogger(__name__)

# Replica names come from log file stems and pod names: letters, digits, '.', '_', '-'.
_REPLICA = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_SPEC_FIELDS = frozenset(f.name for f in dataclasses.fields(JobSpec))
MAX_LOG_LIMIT = 10_000


def _fits(value: Any, hint: Any) -> bool:
    """Whether JSON ``value`` has the shape of type ``hint`` (a JobSpec field's annotation)."""
    if hint is Any:
        return True
    origin, params = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, p) for p in params)
    if hint is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list) and all(_fits(v, params[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            _fits(k, params[0]) and _fits(v, params[1]) for k, v in value.items()
        )
    if dataclasses.is_dataclass(hint):
        return isinstance(value, dict) and check_fields(hint, value, "") is None
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, hint)


def check_fields(cls: Any, data: dict[str, Any], where: str) -> str | None:
    """The first field of ``data`` whose value does not fit dataclass ``cls``, as a message."""
    hints = typing.get_type_hints(cls)
    for name, value in data.items():
        if name in hints and not _fits(value, hints[name]):
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            return f"{where}{name} must be {_describe(hints[name])}, not {shown}"
    return None


def _describe(hint: Any) -> str:
    names = {str: "a string", int: "a whole number", float: "a number", bool: "true or false"}
    if hint in names:
        return names[hint]
    origin, params = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if p is type(None) else _describe(p) for p in params)
    if origin is list:
        return f"a list of {_describe(params[0]).removeprefix('a ')}s"
    if origin is dict:
        return "an object of strings" if params[1] is str else "an object"
    if hint is Volume:
        return 'an object {"claim", "mount_path", "read_only", "sub_path"}'
    return getattr(hint, "__name__", str(hint))


def check_spec_data(spec_data: Any) -> None:
    """Raise ``InvalidSpecError`` naming the first ``spec`` field of the wrong type or unknown."""
    if not isinstance(spec_data, dict):
        raise InvalidSpecError('"spec" must be a JSON object of JobSpec fields')
    unknown = sorted(set(spec_data) - _SPEC_FIELDS)
    if unknown:
        raise InvalidSpecError(
            f"unknown spec field(s) {', '.join(unknown)}; known: {', '.join(sorted(_SPEC_FIELDS))}"
        )
    problem = check_fields(JobSpec, spec_data, "spec.")
    if problem:
        raise InvalidSpecError(problem)
    grace = spec_data.get("options", {}).get("grace_period")
    if grace is not None:
        validate_grace_period(grace, "spec.options.grace_period")


def validate_replica(replica: str | None) -> str | None:
    """Return ``replica`` (None = all) if it is a plausible replica name, else raise."""
    if replica in (None, ""):
        return None
    if not _REPLICA.match(replica) or ".." in replica:
        raise InvalidSpecError(f"{replica!r} is not a replica name (names look like 'rank0' or 'worker-1')")
    return replica


def summary(record: JobRecord, status: JobStatus, deleted: bool = False) -> dict[str, Any]:
    """The one-line view of a job the list shows, as JSON."""
    return to_json(JobSummary.of(record, status, deleted))


@dataclass(frozen=True)
class _Listed:
    fingerprint: tuple[int, ...]  # of the files the summary was made from
    created: str
    summary: dict[str, Any]


class JobService:
    """Jobs of every backend in one store, as the REST API serves them."""

    def __init__(self, store: JobStore, default_backend: str) -> None:
        self.store = store
        self.default_backend = default_backend
        self._backends: dict[str, Backend] = {}
        self._lock = threading.Lock()
        self._ended: dict[str, _Listed] = {}  # summaries of ended jobs, by id

    def backend(self, name: str) -> Backend:
        """The backend called ``name`` over this service's store, made once and kept.

        A backend that cannot be made (not installed, no cluster config) raises each time,
        so installing or configuring it later works without restarting the server.
        """
        with self._lock:
            backend = self._backends.get(name)
            if backend is None:
                backend = self._backends[name] = get_backend(name, self.store)
            return backend

    # -- reading -------------------------------------------------------------------------------
    def list_jobs(self) -> list[dict[str, Any]]:
        """Summaries of every job not deleted, newest first.

        Each backend is asked once for all its jobs; a backend that cannot be imported or
        reached does not break the list: its jobs show their last stored status. An ended
        job's summary is kept while its files stay the same, so a listing reads only what
        changed (and makes little garbage: the UI polls it every few seconds).
        """
        fingerprints = self.store.fingerprints()  # taken before reading: a later write misses the cache
        out: list[_Listed] = []
        changed: list[JobRecord] = []
        for job_id, fingerprint in fingerprints.items():
            hit = self._ended.get(job_id)
            if hit is not None and hit.fingerprint == fingerprint:
                out.append(hit)
                continue
            try:
                changed.append(self.store.read_record(job_id))
            except (OSError, ValueError, KeyError, DistTrainError):
                continue  # being written or removed right now: the next listing has it
        for record, status in self._statuses(changed):
            listed = _Listed(fingerprints[record.id], record.created, summary(record, status))
            out.append(listed)
            if status.is_terminal:
                self._ended[record.id] = listed
        for gone in [j for j in list(self._ended) if j not in fingerprints]:  # deleted or purged
            self._ended.pop(gone, None)
        out.sort(key=lambda listed: listed.created, reverse=True)
        return [listed.summary for listed in out]

    def _statuses(self, records: list[JobRecord]) -> Iterator[tuple[JobRecord, JobStatus]]:
        by_backend: dict[str, list[JobRecord]] = defaultdict(list)
        for record in records:
            by_backend[record.backend].append(record)
        for name, group in by_backend.items():
            statuses: dict[str, JobStatus] = {}
            try:
                statuses = {s.job_id: s for s in self.backend(name).list(group)}
            except Exception as exc:  # ImportError, cluster down...: fall back, keep listing
                log.warning("backend %r could not list its jobs, showing stored status: %s", name, exc)
            for record in group:
                yield record, statuses.get(record.id) or self._stored_status(record)

    def describe(self, job_id: str) -> dict[str, Any]:
        """Spec, launch request, status (replicas, conditions, events) of one job."""
        record = self.store.read_record(job_id)
        deleted = self.store.is_deleted(job_id)
        backend_error = None
        try:
            status = self.backend(record.backend).describe(job_id)
        except (ImportError, DistTrainError, OSError) as exc:  # still show what is stored
            backend_error = str(exc)
            status = self._stored_status(record)
        detail = JobDetail(
            id=job_id,
            summary=JobSummary.of(record, status, deleted),
            spec=record.spec,
            request=record.request,
            status=status,
            deleted=deleted,
            backend_error=backend_error,
        )
        return to_json(detail)

    def script(self, job_id: str) -> dict[str, Any]:
        record = self.store.read_record(job_id)
        return to_json(JobScript(job_id, record.spec.entrypoint, self.store.read_script(job_id)))

    def read_logs(
        self,
        job_id: str,
        replica: str | None = None,
        offset: str | None = None,
        tail: int | None = None,
        limit: int = 1000,
    ) -> dict[str, Any]:
        """Up to ``limit`` lines from ``offset`` (or the last ``tail`` lines), never a whole file
        and never more than ``ANSWER_BYTES`` of it.

        ``offset`` in the answer resumes after the last line returned; ``done`` is true once
        the job has ended and every line has been returned.
        """
        backend, replica, ended = self._log_reader(job_id, replica, tail, limit)
        budget = Budget()
        lines = take_lines(
            backend.logs(job_id, replica, follow=False, tail=tail, offset=offset or None, budget=budget),
            limit,
        )
        more = len(lines) == limit or budget.hit
        page = LogPage(lines, lines[-1].offset if lines else (offset or ""), ended and not more, more)
        return to_json(page)

    def read_runs(
        self,
        job_id: str,
        replica: str | None = None,
        offset: str | None = None,
        tail: int | None = None,
        limit: int = 5000,
    ) -> dict[str, Any]:
        """``read_logs`` in bulk, for the log stream: ``{"runs": [LogRun], "offset", "done",
        "count", "more"}`` (``more``: the answer stopped at its line or byte limit, more is there)."""
        backend, replica, ended = self._log_reader(job_id, replica, tail, limit)
        budget = Budget()
        runs = backend.log_runs(
            job_id, replica, tail=tail, offset=offset or None, max_lines=limit, final=ended, budget=budget
        )
        count = sum(len(run.lines) for run in runs)
        more = count >= limit or budget.hit
        page = LogRunsPage(runs, runs[-1].offset if runs else (offset or ""), ended and not more, count, more)
        return to_json(page)

    def _log_reader(
        self, job_id: str, replica: str | None, tail: int | None, limit: int
    ) -> tuple[Backend, str | None, bool]:
        """Check a log read's arguments; the job's backend, the replica, and whether the job
        has ended, read *before* the lines so that output written before the end is never missed."""
        validate_job_id(job_id)
        replica = validate_replica(replica)
        if tail is not None and tail < 1:
            raise InvalidSpecError("tail must be 1 or more; to get only new lines, pass the last offset")
        if not 1 <= limit <= MAX_LOG_LIMIT:
            raise InvalidSpecError(f"limit must be between 1 and {MAX_LOG_LIMIT}")
        backend = self.backend(self.store.read_record(job_id).backend)
        return backend, replica, backend.describe(job_id).is_terminal

    def phase(self, job_id: str) -> str:
        record = self.store.read_record(job_id)
        try:
            return self.backend(record.backend).describe(job_id).phase.value
        except (ImportError, DistTrainError, OSError):
            return self._stored_status(record).phase.value

    # -- changing ------------------------------------------------------------------------------
    def submit(self, body: Any) -> dict[str, Any]:
        """Submit ``{"script": "...", "spec": {...}}``; answer ``{"id", "job": JobSummary}``.

        With ``"dry_run": true`` nothing is created or launched; the answer is
        ``{"dry_run": DryRun}``, the exact request a submit would carry out.
        """
        if not isinstance(body, dict):
            raise InvalidSpecError('send a JSON object: {"script": "...", "spec": {...}}')
        unknown = sorted(set(body) - {"script", "spec", "dry_run"})
        if unknown:
            raise InvalidSpecError(
                f"unknown field(s) {', '.join(map(repr, unknown))}; send script, spec, dry_run"
            )
        script, spec_data, dry_run = body.get("script"), body.get("spec", {}), body.get("dry_run", False)
        if not isinstance(script, str) or not script.strip():
            raise InvalidSpecError('"script" must be the Python source of the training script')
        if not isinstance(dry_run, bool):
            raise InvalidSpecError('"dry_run" must be true or false')
        check_spec_data(spec_data)
        spec_data = {"backend": self.default_backend, **spec_data}
        try:
            spec = JobSpec.from_dict(spec_data)
        except (TypeError, ValueError, AttributeError) as exc:
            raise InvalidSpecError(f"the spec does not fit JobSpec: {exc}") from None
        backend = self.backend(spec.backend)
        if dry_run:
            return {"dry_run": dataclasses.asdict(backend.dryrun(spec, script=script))}
        job_id = backend.submit(spec, script)
        record = self.store.read_record(job_id)
        return {"id": job_id, "job": summary(record, backend.describe(job_id))}

    def cancel(self, job_id: str) -> dict[str, Any]:
        record = self.store.read_record(job_id)
        return {"status": self.backend(record.backend).cancel(job_id).to_dict()}

    def delete(self, job_id: str, purge: bool = False) -> None:
        """Remove the job from its backend and the list; files stay unless ``purge``."""
        record = self.store.read_record(job_id)
        if self.store.is_deleted(job_id):
            if purge:
                self.store.purge(job_id)
            return
        self.backend(record.backend).delete(job_id, purge=purge)

    def _stored_status(self, record: JobRecord) -> JobStatus:
        try:
            status = self.store.read_status(record.id)
        except (OSError, ValueError, KeyError, DistTrainError):
            status = None
        return status or JobStatus(job_id=record.id, created=record.created)
