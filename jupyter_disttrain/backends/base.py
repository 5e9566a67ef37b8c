"""The backend interface every place that runs jobs implements.

Public methods are concrete and do the shared work (validation, the job directory, the
status record, idempotent cancel); backends fill in the ``_``-prefixed hooks. The dry run is
first-class: ``submit`` builds the dry run's request, stores it in the job record, and the
backend carries out exactly that request. ``spec.options`` are resolved into the backend's
typed ``options`` once per request (``resolve_options``) and that object is what the hooks get.
Reading output (``logaccess.py``) and a rank's prompt (``debugaccess.py``) are parts of their own.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ..launchers import get_launcher
from ..model.errors import BackendError, DistTrainError, InvalidSpecError, JobEndedError, UnknownReplicaError
from ..model.specs import DryRun, Event, JobPhase, JobSpec, JobStatus, ReplicaStatus, now_iso
from ..monitoring.resources import ReplicaState, SeriesTails, quiet_replicas, read_resources
from ..payloads.monitoring import Resources, StackDump
from ..storage.store import JobRecord, JobStore
from .debugaccess import DebugAccess
from .logaccess import LogAccess
from .poolaccess import PoolAccess
from .resolve import declared, resolve

if TYPE_CHECKING:  # a protocol: each backend has its own request type
    from ..model.specs import LaunchRequest


OptsT = TypeVar("OptsT")  # a backend's typed options: an instance of its ``options``


class Backend(LogAccess, DebugAccess, PoolAccess, abc.ABC, Generic[OptsT]):
    """Runs jobs somewhere and reports on them through the job store."""

    #: The name users pass to ``--backend``.
    name: ClassVar[str]
    #: Whether jobs run on this machine (so what a launcher needs must be installed here).
    local: ClassVar[bool] = False
    #: The dataclass declaring this backend's flags (``flags.option`` fields; values land in
    #: ``spec.options``), or None.
    options: ClassVar[type | None] = None

    def __init__(self, store: JobStore | None = None) -> None:
        self.store = store or JobStore()
        self.series_tails = SeriesTails()  # what listings read of the running jobs' series

    # -- submit ------------------------------------------------------------------------------
    def resolve_options(self, options: Mapping[str, Any]) -> OptsT:
        """``spec.options`` as this backend's typed ``options``, checked: parsed here once per
        request, or per use of a stored record, and handed to the hooks that need them."""
        return resolve(self.name, self.options, options, self._parse_options)

    def dryrun(
        self,
        spec: JobSpec,
        job_id: str | None = None,
        *,
        script: str | None = None,
        files: dict[str, bytes] | None = None,
    ) -> DryRun:
        """Validate ``spec`` and return the exact request ``submit`` would carry out.

        Nothing is created or launched. Given the script (and side files), a backend that
        ships code inside its request (a Kubernetes ConfigMap) shows and checks it as well.
        Raises ``InvalidSpecError`` with a one-line reason.
        """
        return self._plan(spec, job_id, script, files)[0]

    def _plan(
        self, spec: JobSpec, job_id: str | None, script: str | None, files: dict[str, bytes] | None
    ) -> tuple[DryRun, OptsT, dict[str, bytes]]:
        """The dry run, the options it resolved and the files beside the script (side files too)."""
        spec.validate()
        if spec.backend != self.name:
            raise InvalidSpecError(f"spec is for backend {spec.backend!r}, not {self.name!r}")
        opts = self.resolve_options(spec.options)
        self._validate(spec, opts)
        launcher = get_launcher(spec.launcher)
        launcher.validate(spec, local=self.local)
        job_id = job_id or self.store.new_job_id(spec.name)
        side = {} if script is None else launcher.side_files(spec, local=self.local)  # as the payload
        files = {**(files or {}), **side}
        payload = {} if script is None else {**files, spec.entrypoint: script.encode("utf-8")}
        info = self._dryrun(spec, job_id, payload, opts)
        info.side_files = side
        return info, opts, files

    def submit(self, spec: JobSpec, script: str, files: dict[str, bytes] | None = None) -> str:
        """Create the job's directory, write the script, launch; return the job id.

        If launching fails the job stays in the store as Failed with the reason, so nothing
        the user submitted is lost.
        """
        info, opts, files = self._plan(spec, None, script, files)
        record = JobRecord(id=info.job_id, spec=spec, request=info.request.to_json())
        status = JobStatus(
            job_id=record.id,
            phase=JobPhase.PENDING,
            created=record.created,
            replicas=self._initial_replicas(spec, info.request),
            events=[Event(now_iso(), "Normal", "Submitted", f"submitted to the {self.name} backend")],
        )
        try:
            self.store.create(record, script, files)
            self.store.write_status(status)
        except OSError as exc:  # a full disk, a read-only root...: leave nothing half-made
            self.store.remove_partial(record.id)
            raise BackendError(
                f"could not write the job directory under {self.store.root}: {exc.strerror or exc}; "
                "nothing was launched"
            ) from exc
        try:
            self._schedule(record, opts)
        except Exception as exc:
            self.store.write_status(status.end(JobPhase.FAILED, "SubmitFailed", str(exc)))
            if isinstance(exc, DistTrainError):
                raise
            raise BackendError(f"could not launch job {record.id}: {exc}") from exc
        return record.id

    # -- observe -----------------------------------------------------------------------------
    def describe(self, job_id: str) -> JobStatus:
        """The job's current status (replicas, conditions, events)."""
        record = self.store.read_record(job_id)
        status = self.store.read_status(job_id) or JobStatus(job_id=job_id, created=record.created)
        return self._reconcile(record, status)

    # -- resources and stacks ------------------------------------------------------------------
    def resources(self, job_id: str, since: float | None = None) -> Resources:
        """Each replica's resource samples newer than ``since`` and its liveness."""
        record = self.store.read_record(job_id)
        status = self.describe(job_id)
        replicas = [ReplicaState.of(r, status.is_terminal) for r in status.replicas]
        return self._resources(record, status, replicas, since)

    def quiet(self, record: JobRecord, status: JobStatus) -> list[str]:
        """The replicas of a Running job flagged quiet, cheaply enough for every listing; [] for
        a job in any other phase."""
        if status.phase is not JobPhase.RUNNING:
            return []
        return self._quiet(record, status)

    def stack(self, job_id: str, replica: str, method: str = "auto") -> StackDump:
        """The Python stacks of every thread of a running replica."""
        record = self.store.read_record(job_id)
        status = self.describe(job_id)
        names = [r.name for r in status.replicas]
        if replica not in names:
            have = ", ".join(names) or "none yet"
            raise UnknownReplicaError(f"job {job_id} has no replica {replica!r}; it has: {have}")
        if status.is_terminal:
            raise JobEndedError(job_id, status.phase.value, "a stack dump")
        return self._stack(record, status, replica, method)

    # -- stop --------------------------------------------------------------------------------
    def cancel(self, job_id: str) -> JobStatus:
        """Stop the job and all its processes; a job that already ended keeps its status, but
        whatever of it still runs (e.g. after its launcher was lost) is stopped too."""
        record = self.store.read_record(job_id)
        status = self.describe(job_id)
        if not status.is_terminal:
            self._cancel_existing(record)
            status = self.describe(job_id)
        else:
            self._stop_leftovers(record)
        return status

    def delete(self, job_id: str, purge: bool = False) -> None:
        """Remove the job from the backend and the listings.

        Its files (script, logs, TensorBoard data) stay on disk and readable unless ``purge``.
        """
        record = self.store.read_record(job_id)
        if not self.describe(job_id).is_terminal:
            self._cancel_existing(record)
        self._delete_existing(record)
        if purge:
            self.store.purge(job_id)
        else:
            self.store.mark_deleted(job_id)

    # -- hooks -------------------------------------------------------------------------------
    def _stop_leftovers(self, record: JobRecord) -> None:
        """Stop what still runs of a job whose status has ended. Nothing by default."""
        return None

    def _parse_options(self, options: dict[str, Any], other: str | None) -> OptsT:
        """Check ``options`` and build the typed object (``other``: the backend that has an option
        this one lacks). By default each field as its ``flags.option`` declares it."""
        parsed: OptsT = declared(self.name, self.options, options, other)
        return parsed

    def _validate(self, spec: JobSpec, opts: OptsT) -> None:
        """Backend-specific checks of ``spec`` (raise ``InvalidSpecError``). None by default."""
        return None

    @abc.abstractmethod
    def _dryrun(self, spec: JobSpec, job_id: str, payload: dict[str, bytes], opts: OptsT) -> DryRun:
        """Build the native request for ``spec`` as ``job_id``, without side effects.

        ``payload`` is the script and side files by file name (empty when not known yet).
        """

    @abc.abstractmethod
    def _schedule(self, record: JobRecord, opts: OptsT) -> None:
        """Carry out ``record.request`` (the dry run's request as JSON); return once the job is launched."""

    def _initial_replicas(self, spec: JobSpec, request: LaunchRequest) -> list[ReplicaStatus]:
        """The replicas a new job will have, all Pending, as the request lays them out."""
        return []

    def _reconcile(self, record: JobRecord, status: JobStatus) -> JobStatus:
        """Bring the stored status up to date with reality (e.g. a launcher that died)."""
        return status

    def _resources(
        self, record: JobRecord, status: JobStatus, replicas: list[ReplicaState], since: float | None
    ) -> Resources:
        """The samples the job's sampler wrote into its job dir."""
        return read_resources(self.store.job_dir(record.id), replicas, since)

    def _quiet(self, record: JobRecord, status: JobStatus) -> list[str]:
        """From the job dir, as ``_resources`` flags them."""
        replicas = [ReplicaState.of(r, False) for r in status.replicas]
        return quiet_replicas(self.store.job_dir(record.id), replicas, self.series_tails)

    def _stack(self, record: JobRecord, status: JobStatus, replica: str, method: str) -> StackDump:
        raise BackendError(f"the {self.name} backend cannot dump a replica's stacks")

    @abc.abstractmethod
    def _cancel_existing(self, record: JobRecord) -> None:
        """Stop a job that has not ended; record it as Cancelled."""

    def _delete_existing(self, record: JobRecord) -> None:
        """Remove what the backend keeps for an ended job (cluster objects...). None by default."""
        return None

    # Last in the class: as a method name, ``list`` would shadow the builtin in later annotations.
    def list(self, records: list[JobRecord] | None = None) -> list[JobStatus]:
        """Status of every (not deleted) job of this backend, newest first.

        ``records``: the store's records, when the caller has just read them (the server lists
        all backends from one read of the store); records of other backends are skipped.
        """
        if records is None:
            records = self.store.records()
        return [
            self._reconcile(r, self.store.read_status(r.id) or JobStatus(job_id=r.id, created=r.created))
            for r in records
            if r.spec.backend == self.name
        ]
