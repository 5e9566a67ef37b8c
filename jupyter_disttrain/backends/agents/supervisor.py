"""The supervisor of a local job's torchrun agents: keeps ``status.json`` true.

It runs in the launcher process (``launch``), which ``LocalBackend`` starts in a session
of its own, so a kernel restart or a closed notebook does not touch it. It records each rank's
phase, exit code and restarts; stops the remaining agents when one fails (a dead peer would
otherwise leave the others blocked in a collective); and on SIGTERM (cancel) stops every
process of the job: TERM, then KILL after the grace period. Its run loop is here; what it
reads off the processes when they misbehave is ``diagnosis``, its side threads (resource
samples, MLflow) are ``sidethreads``, the replicas' own records ``records``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from ...launchers.base import RANKED, replicas_of
from ...model.failure import first_line
from ...model.polling import Backoff
from ...model.specs import Event, JobPhase, JobStatus, iso_seconds, now_iso
from ...monitoring.guard import GuardSettings
from ...runtime.joined import lone_ranks
from ...runtime.sampler import DEFAULT_INTERVAL
from ...storage import procs
from ...storage.store import JobStore, write_record
from .diagnosis import Busy, Diagnosis
from .guarding import GuardThread
from .records import ReplicaRecords, replica_status
from .request import AgentProcess, LocalRequest, request_roles
from .sidethreads import SideThreads

if TYPE_CHECKING:
    import psutil

POLL_SECONDS = 0.1  # while stopping processes
FOLLOWER_WAIT = 30.0  # seconds a run's TensorBoard follower gets to finish after its rank ended
# Status changes reach status.json within half a second; quieter while nothing changes.
_WATCH = (0.05, 0.5)
LAUNCHER_FILE = "launcher.json"
# Room kept for the last status write: when the job's disk fills up, releasing it lets the
# launcher say DiskFull instead of leaving a job that reads Running.
RESERVE_FILE = ".launcher-reserve"
RESERVE_BYTES = 1 << 20
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class Supervisor:
    def __init__(
        self,
        job_dir: str,
        agents: Sequence[AgentProcess],
        launch_error: str | None,
        how: str = "",
        spare: Callable[[psutil.Process, str], bool] | None = None,
    ) -> None:
        self.job_dir = Path(job_dir)
        self.store = JobStore(self.job_dir.parent)
        self.job_id = self.job_dir.name
        self.record = self.store.read_record(self.job_id)
        self.request = LocalRequest.from_json(self.record.request)
        self.status = self.store.read_status(self.job_id) or JobStatus(job_id=self.job_id)
        self.agents = agents
        self.launch_error = launch_error
        self.how = how  # warm or cold, and why (request.start, or why warm start fell through)
        # Which of the launcher's descendants work for others and outlive the job (a backend's
        # own: the local one's warm zygote); the sweep leaves them.
        self._spare = spare or (lambda proc, job_id: False)
        self._ends: list[int | None] | None = None  # each agent's end as a readable descriptor
        self.cancel_requested = False
        self._failed_node: int | None = None  # the first node whose agent failed
        self._stopped_at_exit = False  # every script ended well; processes stuck at exit were stopped
        roles = request_roles(self.record.spec, self.request)
        self._ranked = any(r.via in RANKED for r in roles)  # ranks are replicas of a torchrun role
        self._replicas = replicas_of(roles)
        self.records = ReplicaRecords(self.job_dir)
        self.diagnosis = Diagnosis(self.job_dir, self.request, agents, self._replicas, self.records)
        self.busy = Busy(self.record.spec.launcher, self.request.cache_dir)
        self.side = SideThreads(self.job_dir, self.request, self.records.running, self.diagnosis.log)
        interval = self.request.monitor_interval or DEFAULT_INTERVAL
        settings = GuardSettings.from_json(self.request.guard)
        self.guard = GuardThread(
            self.job_dir, self.job_id, self.record.spec.entrypoint, settings, self.records.running, interval
        )
        self.guard.preparing = lambda: bool(self.busy.now)

    # -- life cycle ---------------------------------------------------------------------------
    def run(self) -> int:
        procs.become_subreaper()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        try:
            return self._run()
        except OSError as exc:
            return self._cannot_write(exc)

    def _run(self) -> int:
        write_record(self.job_dir / LAUNCHER_FILE, procs.process_identity(os.getpid()))
        _reserve(self.job_dir / RESERVE_FILE, RESERVE_BYTES)
        if self.launch_error:
            self._sweep()
            self._finish(JobPhase.FAILED, "LaunchFailed", self.launch_error)
            return 1
        self.status.phase = JobPhase.RUNNING
        self.status.start_time = now_iso()
        world = self.record.spec.world_size
        if self._ranked:
            started = f"started {len(self.agents)} agent(s), world size {world}"
        else:
            started = f"started {len(self.agents)} processes: {', '.join(n for n, _, _ in self._replicas)}"
        self._event("Normal", "Started", f"{started} ({self.how})" if self.how else started)
        self.store.write_status(self.status)
        self.side.start()
        self.guard.start()
        try:
            self._watch()
        finally:
            self.guard.stop()
            self.side.stop()
        return 0

    def _cannot_write(self, exc: OSError) -> int:
        """The launcher's own files cannot be written (a full disk, a quota, a removed dir): the
        status can no longer be kept true, so the job is stopped and says why, written in the
        room reserved for it."""
        with contextlib.suppress(Exception):
            self._stop_all()
        full = exc.errno in _DISK_FULL
        what = exc.strerror or str(exc)
        message = f"{what} writing {exc.filename or self.job_dir}; the job was stopped"
        if full:
            message += " (free space on that filesystem, then run it again)"
        with contextlib.suppress(Exception):
            self._update_replicas(final=True)
        try:
            self._finish(JobPhase.FAILED, "DiskFull" if full else "LauncherError", message)
        except OSError:
            return 1  # nothing can be written at all: readers see the launcher gone (LauncherLost)
        return 1

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.cancel_requested = True

    def _watch(self) -> None:
        poll = Backoff(*_WATCH)
        while True:
            if self.cancel_requested:
                self._cancel()
                return
            codes = [a.poll() for a in self.agents]
            changed = self._update_replicas(final=False)
            changed = self._stop_peers_of_failed_node(codes) or changed
            if all(c is not None for c in codes) or self._stop_stuck_at_exit():
                break
            changed = self._say_exit_stall() or changed
            changed = self._say_busy() or changed
            changed = self._say_guard() or changed
            if changed:
                self.store.write_status(self.status)
            poll.wait(active=changed, wake=self._wake(codes))
        self._conclude()

    def _wake(self, codes: list[int | None]) -> list[int]:
        """What ends the watch's sleep at once: a running agent's end (its pidfd; a warm agent's
        connection), so that a job's end reaches its status without waiting out a poll."""
        if self._ends is None:
            self._ends = [_end_fd(agent) for agent in self.agents]
        return [fd for fd, code in zip(self._ends, codes, strict=True) if code is None and fd is not None]

    def _cancel(self) -> None:
        self._event("Normal", "Cancelling", "cancel requested: stopping all processes")
        self._stop_all()
        self._update_replicas(final=True, cancelled=True)
        self._finish(JobPhase.CANCELLED, "Cancelled", self.guard.cancel_reason or "cancelled by the user")

    def _stop_peers_of_failed_node(self, codes: list[int | None]) -> bool:
        """Once a node fails, stop the others: a dead peer would leave them blocked in a
        collective. True when it did so (the status changed)."""
        if self._failed_node is not None:
            return False
        self._failed_node = next((i for i, c in enumerate(codes) if c not in (None, 0)), None)
        if self._failed_node is None or all(c is not None for c in codes):
            return False
        code = codes[self._failed_node]
        self._event(
            "Warning",
            "NodeFailed",
            f"{self.diagnosis.label(self._failed_node)} exited with code {code}; stopping the others",
        )
        for agent in self.agents:
            if agent.poll() is None:
                agent.terminate()
        return True

    def _conclude(self) -> None:
        """Every agent has exited: leave no process behind and write the job's end."""
        self._sweep()
        self._update_replicas(final=True)
        if self._ranked and (lone := lone_ranks(self.record.spec.world_size, self.records.by_rank)):
            self._event("Warning", "RanksNotJoined", lone)
        codes = [a.returncode for a in self.agents]
        if all(c == 0 for c in codes) or self._stopped_at_exit:
            message = f"all {'ranks' if self._ranked else 'processes'} finished"
            if self._stopped_at_exit:
                message += " (processes stuck at exit were stopped)"
            self._finish(JobPhase.SUCCEEDED, "Completed", message)
            return
        node = (
            self._failed_node if self._failed_node is not None else next(i for i, c in enumerate(codes) if c)
        )
        self.status.exit_code = codes[node]
        self._finish(JobPhase.FAILED, *self.diagnosis.failure(node, codes[node], self.status.replicas))

    # -- what the status says while the job runs -----------------------------------------------
    def _say_exit_stall(self) -> bool:
        """Once: the job is stuck at exit: say so in the status and how to stop it; the job
        keeps Running."""
        message = self.diagnosis.stall()
        if message is None:
            return False
        self.status.reason, self.status.message = "ExitStalled", message
        self._event("Warning", "ExitStalled", message)
        return True

    def _say_guard(self) -> bool:
        """What the stall and idle guard said since the last look, as events; its cancel."""
        events = self.guard.drain()
        for kind, reason, message in events:
            self._event(kind, reason, message)
        if self.guard.cancel_reason:
            self.cancel_requested = True
        return bool(events)

    def _stop_stuck_at_exit(self) -> bool:
        """Every script ended well but a process hangs at exit past the exit timeout: stop the
        job's processes so that it ends as what it is, succeeded, and say so. (A rank whose
        script has not ended is another matter: ``_say_exit_stall``.) True when it did."""
        message = self.diagnosis.stuck_in_teardown()
        if message is None:
            return False
        self._event("Warning", "ExitStalled", message)
        self.store.write_status(self.status)
        self._stop_all()
        self._stopped_at_exit = True
        return True

    def _say_busy(self) -> bool:
        """While the ranks prepare, the status says with what. True when the status changed."""
        since = iso_seconds(self.status.start_time) if self.status.start_time else time.time()
        if not self.busy.changed(since):
            return False
        if self.busy.now:
            self.status.reason, self.status.message = "Preparing", self.busy.now
            self._event("Normal", "Preparing", self.busy.now)
        elif self.status.reason == "Preparing":
            self.status.reason = self.status.message = None
        return True

    def _abandon(self) -> None:
        """The job ended without succeeding: its launcher undoes what it left half done in the
        shared cache (a compile's lock), saying so."""
        if not self.request.cache_dir or not self.status.start_time:
            return
        from ...launchers import get_launcher

        launcher = get_launcher(self.record.spec.launcher)
        with contextlib.suppress(OSError):
            if undone := launcher.abandon(self.request.cache_dir, iso_seconds(self.status.start_time)):
                self._event("Normal", "Abandoned", f"unfinished builds cleared: {', '.join(undone)}")

    # -- stopping ----------------------------------------------------------------------------
    def _stop_all(self) -> None:
        """TERM the agents (they pass it on to their workers), then KILL whatever is left."""
        for agent in self.agents:
            if agent.poll() is None:
                agent.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.request.grace_period
        while time.monotonic() < deadline and any(a.poll() is None for a in self.agents):
            time.sleep(POLL_SECONDS)
        self._sweep(grace=max(0.0, deadline - time.monotonic()))

    def _sweep(self, grace: float = 0.0) -> None:
        """Leave no orphan: every descendant and every process carrying the job id goes (not a
        process the backend spares, such as a zygote this launcher started)."""
        import psutil

        me = psutil.Process()
        leftover = {p.pid: p for p in me.children(recursive=True) if not self._spare(p, self.job_id)}
        leftover.update((p.pid, p) for p in procs.job_processes(self.job_id))
        followers = [p for p in leftover.values() if procs.is_follower(p)]
        if others := [p for p in leftover.values() if p not in followers]:
            procs.stop_processes(others, grace)
        if followers:
            # A run's TensorBoard follower ends by itself once its rank is gone, after writing
            # the last points: a crashed run keeps its events unless it takes too long.
            _, stuck = psutil.wait_procs(followers, timeout=FOLLOWER_WAIT)
            procs.stop_processes(stuck, 0)
        for agent in self.agents:
            with contextlib.suppress(subprocess.TimeoutExpired):
                agent.wait(timeout=5)

    # -- status ------------------------------------------------------------------------------
    def _event(self, kind: str, reason: str, message: str, obj: str | None = None) -> None:
        self.status.events.append(Event(now_iso(), kind, reason, message, obj))

    def _update_replicas(self, final: bool, cancelled: bool = False) -> bool:
        changed = self.records.read()
        if not (changed or final):
            return False
        replicas = []
        exits = self.diagnosis.agent_exits() if final and not cancelled else {}
        for name, role, index in self._replicas:
            rec = self.records.by_name.get(name)
            rep = replica_status(name, role, index, rec, self.diagnosis.log(name))
            if final and not rep.phase.is_terminal:
                self.diagnosis.never_finished(rep, rec, exits, cancelled)
            replicas.append(rep)
        self.status.replicas = replicas
        return True

    def _finish(self, phase: JobPhase, reason: str, message: str) -> None:
        if reason != "DiskFull" and (full := self.diagnosis.disk_full()):
            # Logs, checkpoints and rank records could not be written: why the job failed, or
            # why what it left may be incomplete.
            if phase is JobPhase.FAILED:
                reason, message = "DiskFull", f"{full}: {message}"
            else:
                self._event("Warning", "DiskFull", f"{full}: the job's logs and files may be incomplete")
        (self.job_dir / RESERVE_FILE).unlink(missing_ok=True)
        if phase is not JobPhase.SUCCEEDED:
            self._abandon()
        self.side.stop_mlflow()  # the last points land before the job reads as ended
        self.status.end(phase, reason, message)
        if phase is JobPhase.SUCCEEDED:
            self.status.exit_code = 0
        # The event is the headline (the events table is one line each); the status has the rest.
        self._event("Warning" if phase is JobPhase.FAILED else "Normal", reason, first_line(message))
        self.store.write_status(self.status)


def _end_fd(agent: AgentProcess) -> int | None:
    """A descriptor that becomes readable when ``agent`` ends: its own (a warm agent's
    connection), else a pidfd of its process; None where neither exists."""
    fileno = getattr(agent, "fileno", None)
    if fileno is not None:
        return int(fileno())
    try:
        return os.pidfd_open(agent.pid)
    except (AttributeError, OSError):
        return None


def _reserve(path: Path, size: int) -> None:
    """Allocate ``size`` bytes of real disk blocks at ``path`` (not a sparse file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        if hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, size)
        else:
            os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
