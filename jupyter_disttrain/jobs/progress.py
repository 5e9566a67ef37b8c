"""How far a running job is, for the list, the details and the cell: em's run with a total
(``create_run(total_steps=)``, an hparam ``total_steps``/``max_steps``), else the last tqdm or
Rich redraw in its first replica's log (``progress.py``), read through its backend.

Every poll of the list reads this for each running job, so the read is bounded: the last
``BAR_LINES`` lines within ``BAR_BYTES``; where those lines are too long for that (the budget
is spent before the newest), the last line alone (a piece of at most ``logfiles.MAX_LINE``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model.errors import DistTrainError
from ..model.progress import Progress, last_bar
from ..model.specs import JobPhase, JobStatus
from ..payloads.runs import RunSummary
from ..storage.logfiles import Budget, take_lines

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..storage.store import JobRecord

BAR_LINES = 20  # of the first replica's log searched for a bar's last redraw
BAR_BYTES = 16 * 1024


def from_runs(runs: list[RunSummary]) -> Progress | None:
    """The first running run that knows its total."""
    for run in runs:
        if run.total_steps and run.step is not None:
            return Progress(run.step, run.total_steps, run.eta_seconds, "em", run.run)
    return None


def progress_of(
    backend: Backend, record: JobRecord, status: JobStatus, runs: list[RunSummary]
) -> Progress | None:
    """Where a running job stands (None once it has ended, or when nothing says)."""
    if status.phase is not JobPhase.RUNNING or not status.replicas:
        return None
    found = from_runs(runs)
    if found is not None:
        return found
    try:
        lines, cut = _tail(backend, record.id, status.replicas[0].name, BAR_LINES)
        if cut:  # long lines: the newest were not reached; the last one alone
            lines, _ = _tail(backend, record.id, status.replicas[0].name, 1)
    except (OSError, DistTrainError):
        return None
    return last_bar(lines, record.spec.hparams)


def _tail(backend: Backend, job_id: str, replica: str, count: int) -> tuple[list[str], bool]:
    """The texts of the replica's last ``count`` lines within ``BAR_BYTES``, and whether that
    budget cut them short."""
    budget = Budget(BAR_BYTES)
    lines = take_lines(backend.logs(job_id, replica, follow=False, tail=count, budget=budget), count)
    return [line.text for line in lines], budget.hit
