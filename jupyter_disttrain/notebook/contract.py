"""What the view under a ``%%distrun`` cell promises, said once for every part of it.

To the magic: ``JobView``, the calls it makes on whichever view ``widgets.make_view`` chose (the
widget, ``textview.TextView``). To the lab extension: the names its HTML carries
(``labextension/cellcontract.ts`` declares the same; tests check that they agree): HTML buttons
carry the command and job attributes, the widget's Cancel button the cancel class and the job
class, a rank's debugger input (``debug.py``) its class and the job and rank it answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..jobs.debug import Prompt
    from ..model.progress import Progress
    from ..model.specs import JobStatus, LogLine
    from ..payloads.jobs import Failure
    from ..payloads.monitoring import IncidentSummary, Resources

COMMAND_ATTRIBUTE = "data-disttrain-command"
JOB_ATTRIBUTE = "data-disttrain-job"
CANCEL_CLASS = "jp-DistTrain-cellCancel"
JOB_CLASS_PREFIX = "jp-DistTrain-job-"
LOGS_COMMAND = "disttrain:open-logs"
TENSORBOARD_COMMAND = "disttrain:open-tensorboard"
DIAGNOSE_COMMAND = "disttrain:diagnose"
DEBUG_INPUT_CLASS = "jp-DistTrain-debugInput"
REPLICA_ATTRIBUTE = "data-disttrain-replica"


class JobView(Protocol):
    """What the ``%%distrun`` magic drives while a job runs."""

    def update(self, status: JobStatus) -> None: ...

    def append(self, lines: list[LogLine]) -> None: ...

    def failure(self, story: Failure, lines: list[LogLine]) -> None: ...

    def usage(self, resources: Resources) -> None: ...

    def progress(self, found: Progress | None, shown: str) -> None: ...

    def diagnosis(self, incident: IncidentSummary) -> None: ...

    def prompt(self, replica: str, prompt: Prompt | None, transcript: str) -> None:
        """``replica``'s debugger prompt (None: it closed) and its transcript (``debug.py``)."""

    def close(self) -> None: ...
