"""The supervisor of a local job's torchrun agents: keeps ``status.json`` true.

It runs in the launcher process (``launch``), which ``LocalBackend`` starts in a session
of its own, so a kernel restart or a closed notebook does not touch it. It records each rank's
phase, exit code and restarts; stops the remaining agents when one fails (a dead peer would
otherwise leave the others blocked in a collective); and on SIGTERM (cancel) stops every
process of the job: TERM, then KILL after the grace period.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from ... import procs
from ...launchers.base import RANKED, replicas_of
from ...logfiles import tail_start
from ...polling import Backoff
from ...runtime import contract
from ...runtime.joined import lone_ranks
from ...specs import Event, JobPhase, JobStatus, ReplicaStatus, iso_seconds, now_iso
from ...store import JobStore, read_json, write_json_atomic
from .exits import AgentExit, agent_exits, oom_kills, signal_name
from .request import LocalRequest, request_roles

if TYPE_CHECKING:
    from ...mlflowtb import MlflowTensorBoard
    from ...runtime.sampler import Monitor

POLL_SECONDS = 0.1  # while stopping processes
# Status changes reach status.json within half a second; quieter while nothing changes.
_WATCH = (0.05, 0.5)
LAUNCHER_FILE = "launcher.json"
# Room kept for the last status write: when the job's disk fills up, releasing it lets the
# launcher say DiskFull instead of leaving a job that reads Running.
RESERVE_FILE = ".launcher-reserve"
RESERVE_BYTES = 1 << 20
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_FULL_BELOW = 64 * 1024


# What a failed job's message carries of its root-cause rank's log: a traceback's tail.
TRACEBACK_LINES = 20
TRACEBACK_BYTES = 4096


def last_lines(path: Path, lines: int, max_bytes: int) -> list[str]:
    """The last non-empty lines of a log (at most ``lines`` and ``max_bytes``), read from its end."""
    try:
        with open(path, "rb") as f:
            start = tail_start(path, lines)
            size = os.fstat(f.fileno()).st_size
            f.seek(max(start, size - max_bytes))
            text = f.read(max_bytes).decode("utf-8", "replace")
    except OSError:
        return []
    return [ln.rstrip() for ln in text.splitlines() if ln.strip()][-lines:]


def last_line(path: Path) -> str | None:
    """The last non-empty line of a log (e.g. the exception of a crash)."""
    tail = last_lines(path, 5, 64 * 1024)
    return tail[-1].strip()[:500] if tail else None


class Supervisor:
    def __init__(self, job_dir: str, agents: list[subprocess.Popen[bytes]], launch_error: str | None) -> None:
        self.job_dir = Path(job_dir)
        self.store = JobStore(self.job_dir.parent)
        self.job_id = self.job_dir.name
        self.record = self.store.read_record(self.job_id)
        self.request = LocalRequest.from_json(self.record.request)
        self.status = self.store.read_status(self.job_id) or JobStatus(job_id=self.job_id)
        self.agents = agents
        self.launch_error = launch_error
        self.cancel_requested = False
        self._rank_mtimes: dict[str, float] = {}
        self._rank_records: dict[int, dict[str, Any]] = {}  # torch ranks' records, by rank
        self._records: dict[str, dict[str, Any]] = {}  # every replica's record, by name
        self._stall_said = False
        self._failed_node: int | None = None  # the first node whose agent failed
        self._oom_kills_before = oom_kills()
        roles = request_roles(self.record.spec, self.request)
        # Ranks are replicas of the launcher's torchrun role ("worker").
        self._rank_role = next((r.name for r in roles if r.via in RANKED), "worker")
        self._ranked = any(r.via in RANKED for r in roles)
        self._replicas = replicas_of(roles)
        self._busy: str | None = None  # what the ranks are busy with before training, if anything
        self._busy_next = 0.0
        self._monitor: Monitor | None = None
        self._mlflow: MlflowTensorBoard | None = None

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
        write_json_atomic(self.job_dir / LAUNCHER_FILE, procs.process_identity(os.getpid()))
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
        self._event("Normal", "Started", started)
        self.store.write_status(self.status)
        self._start_monitor()
        self._start_mlflow()
        try:
            self._watch()
        finally:
            if self._monitor is not None:
                self._monitor.stop()
            self._stop_mlflow()
        return 0

    # -- resource monitoring -----------------------------------------------------------------
    def _start_monitor(self) -> None:
        """Sample each running rank's process tree into ``metrics/`` (``runtime.sampler``)."""
        interval = self.request.monitor_interval
        if interval <= 0:
            return
        from ...runtime.sampler import Monitor

        self._monitor = Monitor(
            str(self.job_dir / contract.METRICS_DIR),
            interval,
            self._running_ranks,
            lambda replica: str(self._log(replica)),
            _say,
            gpus=self.request.device == "cuda",
        )
        try:
            self._monitor.start()
        except OSError as exc:  # the job runs on without samples
            self._monitor = None
            _say(f"no resource monitoring: {exc}")

    def _start_mlflow(self) -> None:
        """Follow the ranks' MLflow database into the job's TensorBoard dir (``mlflowtb``)."""
        from ...mlflowtb import follow

        self._mlflow = follow(self.job_dir, _say)

    def _stop_mlflow(self) -> None:
        if self._mlflow is not None:
            self._mlflow.stop()

    def _running_ranks(self) -> dict[str, int]:
        """The replicas running now (name -> pid: torch's ranks and a parameter-server job's
        processes alike), from their records (another thread's reads)."""
        records = list(self._records.items())
        return {
            name: int(rec["pid"]) for name, rec in records if rec.get("exit_code") is None and "pid" in rec
        }

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

    def _disk_full(self) -> str | None:
        """The "the job's disk is full (ROOT)" headline when under 64 KiB is left on it, else None."""
        try:
            free = shutil.disk_usage(self.job_dir).free
        except OSError:
            return None
        return f"the job's disk is full ({self.job_dir.parent})" if free < _FULL_BELOW else None

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
            if all(c is not None for c in codes):
                break
            changed = self._say_exit_stall() or changed
            changed = self._say_busy() or changed
            if changed:
                self.store.write_status(self.status)
            poll.wait(active=changed)
        self._conclude()

    def _cancel(self) -> None:
        self._event("Normal", "Cancelling", "cancel requested: stopping all processes")
        self._stop_all()
        self._update_replicas(final=True, cancelled=True)
        self._finish(JobPhase.CANCELLED, "Cancelled", "cancelled by the user")

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
            f"{self._label(self._failed_node)} exited with code {code}; stopping the others",
        )
        for agent in self.agents:
            if agent.poll() is None:
                agent.terminate()
        return True

    def _conclude(self) -> None:
        """Every agent has exited: leave no process behind and write the job's end."""
        self._sweep()
        self._update_replicas(final=True)
        if self._ranked and (lone := lone_ranks(self.record.spec.world_size, self._rank_records)):
            self._event("Warning", "RanksNotJoined", lone)
        codes = [a.returncode for a in self.agents]
        if all(c == 0 for c in codes):
            self._finish(
                JobPhase.SUCCEEDED, "Completed", f"all {'ranks' if self._ranked else 'processes'} finished"
            )
            return
        node = (
            self._failed_node if self._failed_node is not None else next(i for i, c in enumerate(codes) if c)
        )
        self.status.exit_code = codes[node]
        self._finish(JobPhase.FAILED, *self._failure(node, codes[node]))

    def _failure(self, node: int, code: int | None) -> tuple[str, str]:
        """(reason, message) of a failed job: the root cause first, then what shows it."""
        if killed_by := signal_name(code or 0):
            # The agent itself was killed (the launcher never signals one before a failure):
            # its ranks went with it, and its peers' errors are the consequence.
            return killed_by, f"{self._label(node, the=True)} was killed by {killed_by}"
        # The rank that failed first is the cause; its peers usually fail because it left.
        bad = [r for r in self.status.replicas if r.phase is JobPhase.FAILED and r.exit_code is not None]
        first = min(bad, key=lambda r: r.finish_time or "") if bad else None
        if first is None:
            message = f"{self._label(node)} exited with code {code}"
            if detail := last_line(self._log(self._agent_log(node))):
                message += f": {detail}"
            if hung := self._never_exited():
                # A peer that finished took the rendezvous store down with it: the store's
                # error is the symptom, the rank that never exited is the cause.
                message = f"{hung} (then {message})"
            return "Error", message
        if first.exit_code is not None and first.exit_code < 0:
            reason, message = first.reason or "Error", f"{first.name} was {first.message}"
        else:
            # The headline names the root cause (what one-line views show); its traceback follows.
            reason, message = "Error", f"{first.name} exited with code {first.exit_code}"
            if first.message:
                message += f": {first.message}"
        if tail := last_lines(self._log(first.name), TRACEBACK_LINES, TRACEBACK_BYTES):
            message += "\n" + "\n".join(tail)
        return reason, message

    # -- ranks that hang at exit ---------------------------------------------------------------
    def _never_exited(self, silent_for: float = 0.0) -> str | None:
        """ "rank-1 has not exited N s after rank-0 finished" when some rank finished and others
        have neither exited nor written output for ``silent_for`` seconds since then."""
        done = [
            (rec["finish_time"], self._order(name), name)
            for name, rec in self._records.items()
            if rec.get("exit_code") == 0
        ]
        if not done:
            return None
        finished_iso, _, finished = min(done)
        finished_at = iso_seconds(finished_iso)
        now = time.time()
        hung = []
        for name, _, _ in self._replicas:
            if self._records.get(name, {}).get("exit_code") is not None:
                continue
            with contextlib.suppress(OSError):
                finished_at = max(finished_at, self._log(name).stat().st_mtime)
            if now - finished_at >= silent_for:
                hung.append(name)
        if not hung:
            return None
        who = hung[0] if len(hung) == 1 else f"{hung[0]} (and {len(hung) - 1} more)"
        return f"{who} has not exited {now - iso_seconds(finished_iso):.0f} s after {finished} finished"

    def _say_exit_stall(self) -> bool:
        """Once: the job is stuck at exit (a gloo hang in destroy_process_group, a thread that
        never ends...): say so in the status and how to stop it; the job keeps Running."""
        if self._stall_said:
            return False
        timeout = self.request.exit_timeout
        stall = self._never_exited(silent_for=timeout)
        if stall is None:
            return False
        self._stall_said = True
        message = f"{stall} and printed nothing since; cancel the job to stop it"
        self.status.reason, self.status.message = "ExitStalled", message
        self._event("Warning", "ExitStalled", message)
        return True

    def _say_busy(self) -> bool:
        """While the ranks prepare (DeepSpeed compiling its ops: minutes on a CPU machine), the
        status says so; looked at once a second. True when the status changed."""
        now = time.monotonic()
        if not self.request.cache_dir or now < self._busy_next:
            return False
        self._busy_next = now + 1.0
        from ...launchers import get_launcher

        since = iso_seconds(self.status.start_time) if self.status.start_time else time.time()
        busy = get_launcher(self.record.spec.launcher).busy(self.request.cache_dir, since)
        if busy == self._busy:
            return False
        if busy:
            self.status.reason, self.status.message = "Preparing", busy
            self._event("Normal", "Preparing", busy)
        elif self.status.reason == "Preparing":
            self.status.reason = self.status.message = None
        self._busy = busy
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
    def _grace(self) -> float:
        return self.request.grace_period

    def _stop_all(self) -> None:
        """TERM the agents (they pass it on to their workers), then KILL whatever is left."""
        for agent in self.agents:
            if agent.poll() is None:
                agent.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self._grace()
        while time.monotonic() < deadline and any(a.poll() is None for a in self.agents):
            time.sleep(POLL_SECONDS)
        self._sweep(grace=max(0.0, deadline - time.monotonic()))

    def _sweep(self, grace: float = 0.0) -> None:
        """Leave no orphan: every descendant and every process carrying the job id goes."""
        import psutil

        me = psutil.Process()
        leftover = {p.pid: p for p in me.children(recursive=True)}
        leftover.update((p.pid, p) for p in procs.job_processes(self.job_id))
        if leftover:
            procs.stop_processes(list(leftover.values()), grace)
        for agent in self.agents:
            with contextlib.suppress(subprocess.TimeoutExpired):
                agent.wait(timeout=5)

    # -- status ------------------------------------------------------------------------------
    def _log(self, replica: str) -> Path:
        return self.job_dir / contract.LOGS_DIR / contract.log_file(replica)

    def _event(self, kind: str, reason: str, message: str, obj: str | None = None) -> None:
        self.status.events.append(Event(now_iso(), kind, reason, message, obj))

    def _read_rank_records(self) -> bool:
        ranks_dir = self.job_dir / contract.RANKS_DIR
        changed = False
        try:
            entries = list(os.scandir(ranks_dir))
        except FileNotFoundError:
            return False
        for e in entries:
            if not e.name.endswith(".json"):
                continue
            mtime = e.stat().st_mtime
            if self._rank_mtimes.get(e.name) == mtime:
                continue
            try:
                data = read_json(Path(e.path))
            except (OSError, ValueError):
                continue  # being replaced right now; read it next round
            self._rank_mtimes[e.name] = mtime
            rank = int(data.get("rank", -1))
            name = str(data.get("replica") or contract.rank_name(rank))
            self._records[name] = data
            if name == contract.rank_name(rank):
                self._rank_records[rank] = data
            changed = True
        return changed

    def _update_replicas(self, final: bool, cancelled: bool = False) -> bool:
        changed = self._read_rank_records()
        if not (changed or final):
            return False
        replicas = []
        agent_exits_by_pid = self._agent_exits() if final and not cancelled else {}
        for name, role, index in self._replicas:
            rec = self._records.get(name)
            rep = ReplicaStatus(name=name, role=role, index=index)
            if rec:
                rep.node = f"node-{rec.get('node', 0)}"
                rep.restarts = int(rec.get("restarts", 0))
                rep.start_time = rec.get("start_time")
                rep.finish_time = rec.get("finish_time")
                code = rec.get("exit_code")
                if code is None:
                    rep.phase, rep.ready = JobPhase.RUNNING, True
                elif code == 0:
                    rep.phase, rep.exit_code = JobPhase.SUCCEEDED, 0
                else:
                    rep.phase, rep.exit_code, rep.reason = JobPhase.FAILED, int(code), "Error"
                    rep.message = last_line(self._log(name))
            if final and not rep.phase.is_terminal:
                # Never finished on its own: stopped by cancel, by a failed peer, or killed.
                rep.ready = False
                rep.finish_time = rep.finish_time or now_iso()
                if cancelled:
                    rep.phase, rep.reason = JobPhase.CANCELLED, "Cancelled"
                elif rec is None:
                    rep.phase, rep.reason = JobPhase.FAILED, "NeverStarted"
                elif killed := self._killed(rec, agent_exits_by_pid) or self._process_killed(name):
                    rep.phase, rep.exit_code, rep.reason, rep.message = JobPhase.FAILED, *killed
                else:
                    rep.phase, rep.reason = JobPhase.FAILED, "Terminated"
            replicas.append(rep)
        self.status.replicas = replicas
        return True

    def _agent_exits(self) -> dict[int, AgentExit]:
        exits: dict[int, AgentExit] = {}
        for i, agent in enumerate(self.request.agents):
            if agent.replica is None:
                exits.update(agent_exits(self._log(self._agent_log(i))))
        return exits

    # -- agents and replica processes ------------------------------------------------------------
    def _label(self, i: int, *, the: bool = False) -> str:
        """How the ``i``-th started process is named in a message: its replica, or its node's agent."""
        agent = self.request.agents[i] if i < len(self.request.agents) else None
        if agent is not None and agent.replica is not None:
            return agent.replica
        return f"the torchrun agent of node-{i}" if the else f"torchrun agent of node {i}"

    def _agent_log(self, i: int) -> str:
        agent = self.request.agents[i] if i < len(self.request.agents) else None
        return agent.replica if agent is not None and agent.replica else contract.agent_name(i)

    def _order(self, name: str) -> int:
        return next((i for i, (n, _, _) in enumerate(self._replicas) if n == name), len(self._replicas))

    def _process_killed(self, name: str) -> tuple[int, str, str] | None:
        """(exit code, reason, message) of a replica process that a signal ended which the
        launcher did not send (it stops peers with SIGTERM); None otherwise."""
        i = next((i for i, a in enumerate(self.request.agents) if a.replica == name), None)
        code = self.agents[i].returncode if i is not None and i < len(self.agents) else None
        killed_by = signal_name(code or 0)
        if code is None or killed_by is None or code == -signal.SIGTERM:
            return None
        return code, killed_by, f"killed by {killed_by}"

    def _killed(self, rec: dict[str, Any], exits: dict[int, AgentExit]) -> tuple[int, str, str] | None:
        """(exit code, reason, message) of a rank that a signal ended on its own account, not
        one its agent stopped (SIGTERM) because a peer failed; None otherwise."""
        end = exits.get(int(rec.get("pid", -1)))
        if end is None or end.signal_name is None or (end.code == -signal.SIGTERM and not end.root_cause):
            return None
        if end.code == -signal.SIGKILL and (oom_kills() or 0) > (self._oom_kills_before or 0):
            return end.code, "OOMKilled", "killed by SIGKILL: the kernel's out-of-memory killer (OOMKilled)"
        return end.code, end.signal_name, f"killed by {end.signal_name}"

    def _finish(self, phase: JobPhase, reason: str, message: str) -> None:
        if reason != "DiskFull" and (full := self._disk_full()):
            # Logs, checkpoints and rank records could not be written: why the job failed, or
            # why what it left may be incomplete.
            if phase is JobPhase.FAILED:
                reason, message = "DiskFull", f"{full}: {message}"
            else:
                self._event("Warning", "DiskFull", f"{full}: the job's logs and files may be incomplete")
        (self.job_dir / RESERVE_FILE).unlink(missing_ok=True)
        if phase is not JobPhase.SUCCEEDED:
            self._abandon()
        self._stop_mlflow()  # the last points land before the job reads as ended
        self.status.end(phase, reason, message)
        if phase is JobPhase.SUCCEEDED:
            self.status.exit_code = 0
        self._event("Warning" if phase is JobPhase.FAILED else "Normal", reason, message)
        self.store.write_status(self.status)


def _say(line: str) -> None:
    """One line to ``launcher.log`` (the launcher's stdout)."""
    print(f"disttrain launcher: {line}", flush=True)


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
