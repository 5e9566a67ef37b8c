"""Errors with messages a user can act on.

Every error raised for bad input says what was wrong and what to do instead, in one line,
so the magic, the CLI and the REST API can show ``str(error)`` as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from os import PathLike


class DistTrainError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidSpecError(DistTrainError, ValueError):
    """The job spec or a flag has a value that cannot run; nothing was launched."""


class PackagingError(DistTrainError):
    """The cell (or something it uses) cannot be packaged into a standalone script."""


class UnknownJobError(DistTrainError, KeyError):
    """No job with that id exists in the store (or the backend).

    Says where it looked, and the command that lists jobs where the user is: a terminal
    command by default; the magic sets ``list_command`` to its own.
    """

    list_command = "jupyter disttrain list"

    def __init__(self, job_id: str, searched: Sequence[PathLike[str] | str] = ()) -> None:
        super().__init__(job_id)
        self.job_id = job_id
        self.searched = [str(p) for p in searched]

    def __str__(self) -> str:
        where = f" in {' or '.join(self.searched)}" if self.searched else ""
        return f"no job {self.job_id!r}{where}; `{self.list_command}` shows the jobs that exist"


class UnknownRunError(DistTrainError, LookupError):
    """A job has no run (of ``em``), or a run no artifact file, of that name."""


class UnknownCheckpointError(DistTrainError, LookupError):
    """No checkpoint of the job has that id (ids come from its checkpoint list)."""


class UnknownBackendError(DistTrainError, LookupError):
    """The backend name matches neither a built-in backend nor an entry point."""


class BackendError(DistTrainError):
    """The backend could not carry out a request (cluster refused, process failed to start...)."""


class ForeignJobDirError(UnknownJobError):
    """A directory under the job root that is not a job of this store (renamed, copied, a link)."""

    def __init__(self, job_id: str, why: str) -> None:
        super().__init__(job_id)
        self.why = why

    def __str__(self) -> str:
        return f"{self.job_id!r} under the job root is not a job of this store: {self.why}"


class UnknownReplicaError(DistTrainError, LookupError):
    """The job has no replica of that name (REST: 404)."""


class NoPromptError(DistTrainError):
    """No debugger prompt waits at that rank (it went on, or never stopped) (REST: 409)."""


class JobEndedError(DistTrainError):
    """The request needs a running job and this one has ended (REST: 409)."""

    def __init__(self, job_id: str, phase: str, what: str) -> None:
        super().__init__(f"job {job_id} has ended ({phase}): {what} needs a running job")
        self.phase = phase


class UnknownPoolError(DistTrainError, LookupError):
    """No warm pool has that id (ids come from the pool listing) (REST: 404)."""


class PoolBusyError(DistTrainError):
    """A pool runs a job and was not released by force (REST: 409)."""
