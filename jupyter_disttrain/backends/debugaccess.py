"""Reaching a rank's debugger prompt (docs/notebook.md, "Debugging a rank"), a part of every backend.

A rank that stops in ``breakpoint()`` listens on ``debug/<replica>.sock`` in its job dir
(``runtime/debugger.py``). By default that job dir is on this machine and the socket is used
directly; a backend whose ranks run elsewhere overrides ``_debug`` (Slurm: an ``srun`` step on
the rank's node; Kubernetes: ``pods/exec`` in its pod).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..model.errors import BackendError, JobEndedError, NoPromptError
from ..runtime import contract

if TYPE_CHECKING:
    from ..model.specs import JobStatus
    from ..storage.store import JobRecord, JobStore


class DebugAccess:
    """``debug``: one exchange with a rank's prompt (``runtime/debugrelay.py``'s request and answer)."""

    if TYPE_CHECKING:  # the Backend's
        store: JobStore

        def describe(self, job_id: str) -> JobStatus: ...

    def debug(self, job_id: str, replica: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send ``request`` to the prompt ``replica`` (a rank) waits at; its answer."""
        record = self.store.read_record(job_id)
        status = self.describe(job_id)
        if status.is_terminal:
            raise JobEndedError(job_id, status.phase.value, "a debugger prompt")
        return self._debug(record, replica, request, timeout)

    def _debug(
        self, record: JobRecord, replica: str, request: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """Through the rank's socket in the job dir, on this machine."""
        return debug_here(str(self.store.job_dir(record.id)), replica, request, timeout)


def debug_here(job_dir: str, replica: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One exchange with ``replica``'s prompt through its socket in ``job_dir``, on this machine."""
    from ..runtime.debugrelay import NoDebugger, RelayError, exchange

    path = os.path.join(job_dir, contract.DEBUG_DIR, contract.debug_socket(replica))
    try:
        return exchange(path, request, timeout)
    except NoDebugger as exc:
        raise NoPromptError(f"{replica}: {exc}") from None
    except RelayError as exc:
        raise BackendError(f"{replica}'s debugger: {exc}") from None
