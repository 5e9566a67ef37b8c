"""``--out``'s values put into the kernel's namespace: after a followed cell, and ``%distrun load``.

The job layer reads and rebuilds them (``jobs/values.py``); this says in one line what came back
and, one line each, what did not and why.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from ..model.errors import DistTrainError

if TYPE_CHECKING:
    from ..api import Job
    from ..model.specs import JobStatus

LOAD_USAGE = "%distrun load JOB_ID: bring a finished job's --out values into the kernel"


def bring_back(
    job: Job, status: JobStatus, user_ns: MutableMapping[str, Any], out: Callable[[str], Any]
) -> None:
    """Put the job's values into ``user_ns`` and say so."""
    from ..jobs import values as jobvalues

    values = jobvalues.load(job.store, job.record, status, user_ns)
    user_ns.update(values)
    if values:
        out("back in the kernel: " + ", ".join(f"{name} ({_kind(value)})" for name, value in values.items()))
    for note in values.notes:
        out(note)


def load_command(argv: list[str], user_ns: MutableMapping[str, Any], out: Callable[[str], Any]) -> None:
    """``%distrun load JOB_ID``: the values of a job that has ended (after a kernel restart, or
    of a job run with --detach), as if its cell had just followed it."""
    if len(argv) != 1 or argv[0].startswith("-"):
        raise DistTrainError(f"usage: {LOAD_USAGE}")
    from ..commands import job_of

    job = job_of(argv[0], "%distrun")
    status = job.status()
    if not status.is_terminal:
        raise DistTrainError(f"job {job.id} is {status.phase.value}: load its values once it has ended")
    bring_back(job, status, user_ns, out)


def _kind(value: Any) -> str:
    if isinstance(value, list) and value and len({type(v) for v in value}) == 1:
        return f"list of {len(value)} {type(value[0]).__name__}"
    return type(value).__name__
