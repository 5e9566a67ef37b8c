"""How far a running job is, for the list, the details and the cell: em's run with a total
(``create_run(total_steps=)``, an hparam ``total_steps``/``max_steps``), else the last tqdm
redraw in its first replica's log (``progress.py``), read through its backend and bounded."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import DistTrainError
from .logfiles import Budget, take_lines
from .payloads import RunSummary
from .progress import Progress, last_bar
from .specs import JobPhase, JobStatus

if TYPE_CHECKING:
    from .backends.base import Backend
    from .store import JobRecord

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
        lines = take_lines(
            backend.logs(
                record.id, status.replicas[0].name, follow=False, tail=BAR_LINES, budget=Budget(BAR_BYTES)
            ),
            BAR_LINES,
        )
    except (OSError, DistTrainError):
        return None
    return last_bar([line.text for line in lines], record.spec.hparams)
