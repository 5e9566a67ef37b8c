"""Why a local job's processes did what they did, told in its status.

What the supervisor reads off its processes and files once they misbehave: the root cause of a
failure (the rank that failed first; an agent killed by a signal; a rank that never exited),
how a replica that never finished ended (killed by a signal, by the OOM killer, never started,
stopped by a failed peer), a rank stuck at exit, what the ranks are busy with before training,
and a full disk.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...model.specs import JobPhase, ReplicaStatus, iso_seconds, now_iso
from ...runtime import contract
from ...storage import procs
from ...storage.logfiles import last_line, last_lines
from .exits import AgentExit, agent_exits, oom_kills, signal_name
from .records import ReplicaRecords
from .request import AgentProcess, LocalRequest

# What a failed job's message carries of its root-cause rank's log: a traceback's tail.
TRACEBACK_LINES = 20
TRACEBACK_BYTES = 4096
_FULL_BELOW = 64 * 1024  # bytes left on the job's disk below which it counts as full


class Diagnosis:
    """Reads the processes of one job: its agents (one per node, or a replica process each),
    its replicas' records and logs."""

    def __init__(
        self,
        job_dir: Path,
        request: LocalRequest,
        agents: Sequence[AgentProcess],
        replicas: list[tuple[str, str, int]],
        records: ReplicaRecords,
    ) -> None:
        self.job_dir = job_dir
        self.request = request
        self.agents = agents
        self.replicas = replicas  # (name, role, index) of every replica, in order
        self.records = records
        self._oom_kills_before = oom_kills()
        self._stall_said = False

    def log(self, replica: str) -> Path:
        return self.job_dir / contract.LOGS_DIR / contract.log_file(replica)

    # -- agents and replica processes ------------------------------------------------------------
    def label(self, i: int, *, the: bool = False) -> str:
        """How the ``i``-th started process is named in a message: its replica, or its node's agent."""
        agent = self.request.agents[i] if i < len(self.request.agents) else None
        if agent is not None and agent.replica is not None:
            return agent.replica
        return f"the torchrun agent of node-{i}" if the else f"torchrun agent of node {i}"

    def agent_log(self, i: int) -> str:
        agent = self.request.agents[i] if i < len(self.request.agents) else None
        return agent.replica if agent is not None and agent.replica else contract.agent_name(i)

    def agent_exits(self) -> dict[int, AgentExit]:
        """How the agents saw their failed workers end, by the workers' pids."""
        exits: dict[int, AgentExit] = {}
        for i, agent in enumerate(self.request.agents):
            if agent.replica is None:
                exits.update(agent_exits(self.log(self.agent_log(i))))
        return exits

    # -- a failed job ----------------------------------------------------------------------------
    def failure(self, node: int, code: int | None, replicas: list[ReplicaStatus]) -> tuple[str, str]:
        """(reason, message) of a failed job: the root cause first, then what shows it."""
        if killed_by := signal_name(code or 0):
            # The agent itself was killed (the launcher never signals one before a failure):
            # its ranks went with it, and its peers' errors are the consequence.
            return killed_by, f"{self.label(node, the=True)} was killed by {killed_by}"
        # The rank that failed first is the cause; its peers usually fail because it left.
        bad = [r for r in replicas if r.phase is JobPhase.FAILED and r.exit_code is not None]
        first = min(bad, key=lambda r: r.finish_time or "") if bad else None
        if first is None:
            return "Error", self._agent_failure(node, code)
        if first.exit_code is not None and first.exit_code < 0:
            reason, message = first.reason or "Error", f"{first.name} was {first.message}"
        else:
            # The headline names the root cause (what one-line views show); its traceback follows.
            reason, message = "Error", f"{first.name} exited with code {first.exit_code}"
            if first.message:
                message += f": {first.message}"
        if tail := last_lines(self.log(first.name), TRACEBACK_LINES, TRACEBACK_BYTES):
            message += "\n" + "\n".join(tail)
        return reason, message

    def _agent_failure(self, node: int, code: int | None) -> str:
        """An agent failed with no rank to blame: its last words, after the rank that hung."""
        message = f"{self.label(node)} exited with code {code}"
        if detail := last_line(self.log(self.agent_log(node))):
            message += f": {detail}"
        if hung := self.never_exited():
            # A peer that finished took the rendezvous store down with it: the store's
            # error is the symptom, the rank that never exited is the cause.
            message = f"{hung} (then {message})"
        return message

    def never_finished(
        self, rep: ReplicaStatus, rec: dict[str, Any] | None, exits: dict[int, AgentExit], cancelled: bool
    ) -> None:
        """End ``rep``, a replica the job outlived: stopped by cancel, by a failed peer, or killed."""
        rep.ready = False
        rep.finish_time = rep.finish_time or now_iso()
        if cancelled:
            rep.phase, rep.reason = JobPhase.CANCELLED, "Cancelled"
        elif rec is None:
            rep.phase, rep.reason = JobPhase.FAILED, "NeverStarted"
        elif ended := self._killed(rec, exits) or self._process_killed(rep.name) or self._exited(rec, exits):
            rep.phase, rep.exit_code, rep.reason, rep.message = JobPhase.FAILED, *ended
        else:
            rep.phase, rep.reason = JobPhase.FAILED, "Terminated"

    @staticmethod
    def _exited(rec: dict[str, Any], exits: dict[int, AgentExit]) -> tuple[int, str, str] | None:
        """(exit code, reason, message) of a rank that ended by an exit code without returning
        from its script (``os._exit``, maybe in a signal handler), so its record has no end: its
        agent's failure report has the code. Only the root cause: the peers its agent then
        stopped are Terminated, whatever their handlers exit with."""
        end = exits.get(int(rec.get("pid", -1)))
        if end is None or end.code <= 0 or not end.root_cause:
            return None
        return end.code, "Error", "its torchrun agent's report (it ended without returning from its script)"

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

    # -- ranks that hang at exit ---------------------------------------------------------------
    def never_exited(self, silent_for: float = 0.0) -> str | None:
        """ "rank-1 has not exited N s after rank-0 finished" when some rank finished and others
        have neither exited nor written output for ``silent_for`` seconds since then."""
        records = self.records.by_name
        done = [
            (rec["finish_time"], self._order(name), name)
            for name, rec in records.items()
            if rec.get("exit_code") == 0
        ]
        if not done:
            return None
        finished_iso, _, finished = min(done)
        finished_at = iso_seconds(finished_iso)
        now = time.time()
        hung = []
        for name, _, _ in self.replicas:
            if records.get(name, {}).get("exit_code") is not None:
                continue
            with contextlib.suppress(OSError):
                finished_at = max(finished_at, self.log(name).stat().st_mtime)
            if now - finished_at >= silent_for:
                hung.append(name)
        if not hung:
            return None
        who = hung[0] if len(hung) == 1 else f"{hung[0]} (and {len(hung) - 1} more)"
        return f"{who} has not exited {now - iso_seconds(finished_iso):.0f} s after {finished} finished"

    def stall(self) -> str | None:
        """Once: the message saying the job is stuck at exit (a gloo hang in
        destroy_process_group, a thread that never ends...) and how to stop it; else None."""
        if self._stall_said:
            return None
        stall = self.never_exited(silent_for=self.request.exit_timeout)
        if stall is None:
            return None
        self._stall_said = True
        return f"{stall} and printed nothing since; cancel the job to stop it"

    def stuck_in_teardown(self) -> str | None:
        """ "rank-1 finished its script but has not exited N s later..." when every replica's script
        ended well and none has printed for ``exit_timeout`` seconds since, yet a process of the
        job is still there: what is left is teardown (a non-daemon thread never ending, an
        atexit function, a destructor), which cannot change the job's outcome. Else None."""
        ends = [self.records.by_name.get(name) or {} for name, _, _ in self.replicas]
        if not ends or any(rec.get("exit_code") != 0 or "finish_time" not in rec for rec in ends):
            return None
        last = max(iso_seconds(rec["finish_time"]) for rec in ends)
        for name, _, _ in self.replicas:
            with contextlib.suppress(OSError):
                last = max(last, self.log(name).stat().st_mtime)
        silent = time.time() - last
        if silent < self.request.exit_timeout:
            return None
        alive = {p.pid for p in procs.job_processes(self.job_dir.name)}
        pairs = zip(self.replicas, ends, strict=True)
        stuck = [name for (name, _, _), rec in pairs if rec.get("pid") in alive]
        stuck = stuck or [self.label(i) for i, a in enumerate(self.agents) if a.poll() is None]
        who = ", ".join(stuck) or "a process of the job"
        return (
            f"{who} finished its script but has not exited {silent:.0f} s later (stuck at exit: a "
            "thread that never ends, an atexit function...); every script ended well, so it was "
            "stopped and the job succeeded"
        )

    def _order(self, name: str) -> int:
        return next((i for i, (n, _, _) in enumerate(self.replicas) if n == name), len(self.replicas))

    # -- the job's disk ----------------------------------------------------------------------------
    def disk_full(self) -> str | None:
        """The "the job's disk is full (ROOT)" headline when under 64 KiB is left on it, else None."""
        try:
            free = shutil.disk_usage(self.job_dir).free
        except OSError:
            return None
        return f"the job's disk is full ({self.job_dir.parent})" if free < _FULL_BELOW else None


class Busy:
    """What the ranks are busy with before training (DeepSpeed compiling its ops: minutes on a
    CPU machine), as the job's launcher sees it in the per-user cache; looked at once a second."""

    def __init__(self, launcher: str, cache_dir: str | None) -> None:
        self.launcher = launcher
        self.cache_dir = cache_dir
        self.now: str | None = None
        self._next = 0.0

    def changed(self, since: float) -> bool:
        """Look again (the job started at ``since``); True when ``now`` changed."""
        clock = time.monotonic()
        if not self.cache_dir or clock < self._next:
            return False
        self._next = clock + 1.0
        from ...launchers import get_launcher

        busy = get_launcher(self.launcher).busy(self.cache_dir, since)
        if busy == self.now:
            return False
        self.now = busy
        return True
