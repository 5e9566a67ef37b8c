"""MLflow's metrics in the job's TensorBoard: a thread that follows the job's ``mlflow.db``.

Each ``log_metric`` point becomes the scalar ``mlflow/<key>`` at its step in
``<tensorboard dir>/<run>``, ``<run>`` being the run's name in the runs table
(``_mlflow.<name>``), so the runs view's TensorBoard selection finds it. The database is read as
``mlflowdb`` reads it (read-only, never a lock held, bounded batches by rowid); one missing,
locked or not MLflow's is read again at the next poll. The writer (``torch.utils.tensorboard``)
is imported only once a point exists: a job that does not use MLflow pays one ``stat`` a poll.
A local job's launcher runs it (``backends/local/supervisor``), on Kubernetes the pod wrapper of
rank 0's replica when the job dir is on the PVC (``podscript``); ``stop`` reads to the end and
flushes, so the last points land before the job's end is written.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..runtime.contract import TENSORBOARD_DIR
from . import mlflowdb

log = logging.getLogger(__name__)

POLL = 1.0  # seconds between reads of the database
BATCH = 2000  # rows a query
BATCHES_A_POLL = 5  # a busy job's backlog is caught up over several polls, not one long hold


class MlflowTensorBoard:
    def __init__(self, job_dir: Path, logdir: Path, say: Callable[[str], None], poll: float = POLL) -> None:
        self.job_dir = job_dir
        self.logdir = logdir
        self._say = say
        self._poll = poll
        self._since = 0  # the last row written
        self._names: dict[str, str] = {}  # run uuid -> its directory under logdir
        self._writers: dict[str, Any] = {}  # directory -> SummaryWriter
        self._broken = False  # no TensorBoard writer here: said once, then the thread only waits
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mlflow-tensorboard", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Write every point left in the database, then close the event files (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.follow(batches=None)
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()

    def _run(self) -> None:
        while not self._stop.wait(self._poll):
            self.follow(batches=BATCHES_A_POLL)

    def follow(self, batches: int | None) -> int:
        """Write the points logged since the last call (up to ``batches`` batches; None: all).
        Returns how many were written."""
        written = 0
        while not self._broken and (batches is None or batches > 0):
            try:
                rows = mlflowdb.metric_rows(self.job_dir, self._since, BATCH)
                self._write(rows)
            except Exception as exc:  # the job runs on: its db has every point
                self._broken = True
                self._say(f"MLflow metrics are not written into TensorBoard: {exc}")
                break
            if not rows:
                break
            self._since = rows[-1].row
            written += len(rows)
            batches = None if batches is None else batches - 1
        for writer in self._writers.values():
            writer.flush()
        return written

    def _write(self, rows: list[mlflowdb.MetricRow]) -> None:
        for row in rows:
            if row.value is None:  # NULL or text where MLflow keeps a number: nothing to plot
                continue
            writer = self._writer(self._name(row.uuid))
            writer.add_scalar(f"mlflow/{row.key}", row.value, row.step, walltime=row.time)

    def _name(self, uuid: str) -> str:
        if uuid not in self._names:  # a new run: the names as the runs table gives them
            for run in mlflowdb.runs(self.job_dir):
                self._names.setdefault(run.uuid, run.name)
        return self._names.setdefault(uuid, mlflowdb.PREFIX + uuid)

    def _writer(self, name: str) -> Any:
        if name not in self._writers:
            from torch.utils.tensorboard import SummaryWriter

            self._writers[name] = SummaryWriter(log_dir=str(self.logdir / name))
        return self._writers[name]


def follow(job_dir: str | Path, say: Callable[[str], None]) -> MlflowTensorBoard:
    """Start following ``<job_dir>/mlflow.db`` into ``<job_dir>/tensorboard``."""
    follower = MlflowTensorBoard(Path(job_dir), Path(job_dir) / TENSORBOARD_DIR, say)
    follower.start()
    return follower
