"""The threads a local job's launcher runs beside its run loop.

- the resource sampler (``runtime.sampler.Monitor``): each running replica's process tree into
  ``metrics/``, every ``request.monitor_interval`` seconds;
- the MLflow follower (``mlflowtb``): the ranks' MLflow database into the job's TensorBoard dir.

Neither is the job's business: one that cannot start says so in ``launcher.log`` and the job
runs on without it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ...runtime import contract
from .request import LocalRequest

if TYPE_CHECKING:
    from ...runtime.sampler import Monitor
    from ...tracking.mlflowtb import MlflowTensorBoard


class SideThreads:
    """The sampler and the MLflow follower of one job."""

    def __init__(
        self,
        job_dir: Path,
        request: LocalRequest,
        running: Callable[[], dict[str, int]],
        log: Callable[[str], Path],
    ) -> None:
        self.job_dir = job_dir
        self.request = request
        self._running = running  # name -> pid of the replicas running now (called from the sampler)
        self._log = log  # a replica's log file
        self._monitor: Monitor | None = None
        self._mlflow: MlflowTensorBoard | None = None

    def start(self) -> None:
        self._start_monitor()
        self._start_mlflow()

    def stop(self) -> None:
        if self._monitor is not None:
            self._monitor.stop()
        self.stop_mlflow()

    def stop_mlflow(self) -> None:
        """Write the last points and stop following (before the job reads as ended)."""
        if self._mlflow is not None:
            self._mlflow.stop()

    def _start_monitor(self) -> None:
        """Sample each running rank's process tree into ``metrics/`` (``runtime.sampler``)."""
        interval = self.request.monitor_interval
        if interval <= 0:
            return
        from ...runtime.sampler import Monitor

        self._monitor = Monitor(
            str(self.job_dir / contract.METRICS_DIR),
            interval,
            self._running,
            lambda replica: str(self._log(replica)),
            say,
            gpus=self.request.device == "cuda",
        )
        try:
            self._monitor.start()
        except OSError as exc:  # the job runs on without samples
            self._monitor = None
            say(f"no resource monitoring: {exc}")

    def _start_mlflow(self) -> None:
        """Follow the ranks' MLflow database into the job's TensorBoard dir (``mlflowtb``)."""
        from ...tracking.mlflowtb import follow

        self._mlflow = follow(self.job_dir, say)


def say(line: str) -> None:
    """One line to ``launcher.log`` (the launcher's stdout)."""
    print(f"disttrain launcher: {line}", flush=True)
