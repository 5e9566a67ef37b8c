"""The stall and idle guard of the jobs that no launcher of ours watches: Kubernetes jobs, guarded
by the Jupyter server while it runs (docs/architecture.md "The guard").

A local or Slurm job's launcher guards it (``backends/local/guarding.py``). A Kubernetes job has
no such process: its pods may not delete their workload (the service account they run as has no
right to) and cannot reach each other's ranks' sockets, while the server has the cluster access
for both, a diagnosis through ``pods/exec`` and a cancel. Every few seconds ``ServerGuard`` looks
at each running job of such a backend: progress (``em`` and TensorBoard writes on the PVC, the
step of rank 0's tqdm bar read through its backend), utilisation (the pods' samplers on the PVC,
else metrics-server's CPU) and the same judgement (``monitoring.guard``); its collectives are not
polled (that would be a ``pods/exec`` per look). What it says goes to the job's ``guard.json``
(the listing's badge, the lab's notification); ``diagnose`` adds an incident, ``cancel`` deletes
the workload, whose pods get SIGTERM (``em.on_preempt`` first) within their grace period.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..model.specs import JobPhase, iso_seconds
from ..monitoring import guard
from ..monitoring.resources import progress_times
from ..payloads.monitoring import GuardState

if TYPE_CHECKING:
    from .manager import JobManager, Listed

log = logging.getLogger(__name__)
GUARDED_HERE = ("kubernetes",)  # backends whose jobs no launcher of ours guards


@dataclass
class _Watched:
    guard: guard.Guard
    since: float | None = None  # the last resources answer's ``now``


class ServerGuard:
    """The guard of every running job of ``GUARDED_HERE`` backends in the manager's store."""

    def __init__(self, manager: JobManager) -> None:
        self.manager = manager
        self._jobs: dict[str, _Watched] = {}

    def run(self, stop: threading.Event, every: float = 5.0) -> None:
        """Look every ``every`` seconds (sooner for a job whose thresholds are shorter; three times
        as seldom while no job is guarded: a listing of the store is what a look costs) until ``stop``."""
        while not stop.wait(
            min([every if self._jobs else 3 * every, *(w.guard.settings.tick for w in self._jobs.values())])
        ):
            try:
                self.look()
            except Exception:  # a look that failed: the next one tries again
                log.warning("jupyter_disttrain: the stall and idle guard could not look", exc_info=True)

    def look(self, now: float | None = None) -> dict[str, GuardState]:
        """One look at every guarded job; the states that are new (stalled, idle) by job id."""
        now = time.time() if now is None else now
        running = [
            listed
            for listed in self.manager.list_jobs()
            if listed.record.backend in GUARDED_HERE and listed.status.phase is JobPhase.RUNNING
        ]
        for gone in set(self._jobs) - {listed.record.id for listed in running}:
            del self._jobs[gone]
        found = {}
        for listed in running:
            state = self._look_at(listed, now)
            if state is not None:
                found[listed.record.id] = state
        return found

    def _look_at(self, listed: Listed, now: float) -> GuardState | None:
        record, status = listed.record, listed.status
        settings = guard.GuardSettings.from_json(record.request.get("guard"))
        if settings.action == "off":
            return None
        watched = self._jobs.get(record.id)
        if watched is None:
            start = iso_seconds(status.start_time) if status.start_time else now
            watched = self._jobs[record.id] = _Watched(guard.Guard(settings, start, 2.0))
        job_dir = self.manager.store.job_dir(record.id)
        progress = self.manager.progress(record, status)
        written = max(progress_times(job_dir).values(), default=None)
        watched.guard.see_progress((written, progress.step if progress else None), now)
        with contextlib.suppress(Exception):  # no samples (no PVC, no metrics-server): progress only
            resources = self.manager.resources(record.id, watched.since)
            watched.since = resources.now
            watched.guard.interval = resources.interval
            for name, replica in resources.replicas.items():
                if replica.ended:
                    watched.guard.forget([name])
                else:
                    watched.guard.add_samples(name, [dataclasses.asdict(s) for s in replica.samples])
        before = watched.guard.state
        state = watched.guard.judge(now)
        if state is not None:
            self._act(record.id, state)
        elif before is not None and watched.guard.state is None:
            guard.write_state(job_dir, None)
        return state

    def _act(self, job_id: str, state: GuardState) -> None:
        job_dir = self.manager.store.job_dir(job_id)
        guard.write_state(job_dir, state)
        if state.action in ("diagnose", "cancel"):
            try:
                state.incident = self.manager.diagnoses.diagnose(job_id, trigger=state.state).name
                guard.write_state(job_dir, state)
            except Exception as exc:  # the cancel below still happens
                log.warning("jupyter_disttrain: could not diagnose %s: %s", job_id, exc)
        if state.action == "cancel":
            self.manager.cancel(job_id)
