"""Entry point of a Slurm job's launcher: start one ``srun`` step per node, then supervise.

``python -m jupyter_disttrain.backends.slurm.launch JOB_DIR``: the batch script ``exec``s it on
the job's first node (a batch job), or the backend starts it beside the kernel (job steps in an
allocation). It is the shared launcher (``backends/agents/``) with ``srun`` agents (``SlurmSupervisor``);
what differs is how a step is stopped and who asked.

A requeued job runs it again (``SLURM_RESTART_COUNT``): the new run appends to the same logs
and runs, and the last run's rank and node records move to ``slurm/runs/<restart>/``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from ...model.specs import Event, JobPhase, JobStatus, now_iso
from ...runtime import contract
from ...storage.store import write_record
from ..agents.request import AgentProcess
from ..agents.start import start_cold
from ..agents.supervisor import Supervisor
from . import client
from .keeper import serves_others as keeper_serves_others
from .kept import ended_while_kept, keep
from .node import NODES_DIR, RUN_ENV, SLURM_DIR
from .node import read_json as read_node
from .request import BATCH, KEPT, STEP, SlurmRequest

CANCEL_FILE = "cancel.json"  # written by the backend before it signals: a cancel by the user
STOPPED_FILE = "stopped.json"  # written here when Slurm stopped the job: what Slurm said then
RUNS_DIR = "runs"
WARM_STARTED = "warm: forked from the warm step on each node (no new step)"
WARM_NEW_STEP = "warm: forked from the warm step started for it on each node (re-runs start no step)"


class SrunAgent:
    """One node's ``srun`` as the supervisor drives a torchrun agent (a ``request.AgentProcess``).

    srun ends its step at once on SIGTERM (SIGKILL to every task), so a graceful stop goes
    through Slurm instead: ``scancel --signal=TERM JOB.STEP`` reaches every process of the step
    as a time limit's SIGTERM does; the step's id is in the node agent's record."""

    def __init__(self, proc: AgentProcess, job_dir: str, node: int) -> None:
        self.proc = proc
        self.job_dir = job_dir
        self.node = node
        self.pid = proc.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        self.returncode = self.proc.poll()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.returncode = self.proc.wait(timeout)
        return self.returncode

    def _step(self) -> str | None:
        found = read_node(os.path.join(self.job_dir, SLURM_DIR, NODES_DIR, f"node-{self.node}.json"))
        if found and found.get("job") and found.get("step") and "exit_code" not in found:
            return f"{found['job']}.{found['step']}"
        return None

    def send_signal(self, sig: int) -> None:
        step = self._step() if self.poll() is None else None
        if sig == signal.SIGTERM and step is not None:
            try:
                client.SlurmClient().cancel(step, signal="TERM")
                return
            except client.SlurmUnavailable:
                pass  # Slurm does not answer: srun ends the step itself
        self.proc.send_signal(sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)


class SlurmSupervisor(Supervisor):
    """The local supervisor, told apart a cancel by the user from a stop by Slurm."""

    def __init__(
        self, job_dir: str, agents: Sequence[AgentProcess], launch_error: str | None, how: str = ""
    ) -> None:
        # The keeper of the allocation's warm steps that this launcher may have started (and its
        # srun steps) serves the next jobs: the sweep spares it.
        super().__init__(job_dir, agents, launch_error, how, spare=keeper_serves_others)
        self.slurm_request = SlurmRequest.from_json(self.record.request)
        self.slurm_job = os.environ.get("SLURM_JOB_ID") or self.slurm_request.allocation
        self.restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        self._signal = "SIGTERM"
        self._node_names: dict[str, str] = {}
        self.guard.read_ranks = self._read_ranks
        if self.restarts and (self.status.is_terminal or self.status.phase is not JobPhase.PENDING):
            self.status = _reopened(self.status, self.restarts)

    def _read_ranks(self, names: list[str]) -> dict[str, dict[str, object]]:
        """A diagnosis reads the ranks of other nodes through srun, as the backend does."""
        from .onnode import read_ranks

        return read_ranks(self.store, self.record, self.status)

    def run(self) -> int:
        if self.slurm_request.mode == KEPT and self.slurm_job:
            where = os.environ.get("SLURMD_NODENAME") or "its first node"
            self._event(
                "Normal", "SlurmJob", f"runs in kept Slurm job {self.slurm_job} on {where} (no sbatch)"
            )
        elif self.slurm_request.mode == BATCH and self.slurm_job:
            where = os.environ.get("SLURMD_NODENAME") or "its first node"
            run = f"run {self.restarts + 1}" if self.restarts else "the batch script"
            self._event("Normal", "SlurmJob", f"Slurm job {self.slurm_job} started {run} on {where}")
        code = super().run()
        # Slurm (and sacct) then say FAILED for a failed job, not COMPLETED.
        return code or int(self.status.phase is JobPhase.FAILED)

    def _finish(self, phase: JobPhase, reason: str, message: str) -> None:
        """The end, and what ended a warm step under the job, if so (its agent's last word): for
        a failed job, that is why it failed (its reason and message, not what its stopped agent
        said as it went), else an event said first."""
        lost = [str(word["lost"]) for a in self.agents if (word := getattr(a, "last_word", {})).get("lost")]
        if lost and phase is JobPhase.FAILED:  # the end's own event then says it
            reason, message = "WarmStepLost", "; ".join(lost)
        else:
            for said in lost:
                self._event("Warning", "WarmStepLost", said)
        super()._finish(phase, reason, message)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signal = signal.Signals(signum).name
        super()._on_signal(signum, frame)

    def _cancel(self) -> None:
        """A cancel by the user (the backend's marker; or any SIGTERM to a launcher beside the
        kernel, as to a local job's), else Slurm stopping the batch job."""
        stoppable = self.slurm_request.mode in (BATCH, KEPT)  # Slurm may stop the job it runs in
        if not stoppable or (self.job_dir / SLURM_DIR / CANCEL_FILE).exists():
            super()._cancel()
            return
        said = self._slurm_says()
        write_record(
            self.job_dir / SLURM_DIR / STOPPED_FILE, {"time": now_iso(), "signal": self._signal, **said}
        )
        what = f"Slurm job {self.slurm_job}"
        said_text = ", ".join(f"{k} {v}" for k, v in said.items() if v) or "nothing more"
        if said.get("state") == "RUNNING":  # Slurm goes on: a warning (--signal=B:TERM@...) to stop now
            self._event("Warning", "SlurmSignal", f"{self._signal} from Slurm while {what} runs: stopping")
            self._stop_all()
            self._update_replicas(final=True)
            self._finish(
                JobPhase.FAILED, "SlurmStopped", f"stopped on Slurm's {self._signal} to {what}'s launcher"
            )
            return
        message = f"Slurm is stopping {what} ({self._signal} to the launcher; Slurm says: {said_text})"
        # Said first: Slurm kills what is left of the job KillWait seconds after its SIGTERM.
        # Not an end: the backend names it (TIMEOUT, PREEMPTED, a requeue...) from Slurm's answer.
        self._event("Warning", "SlurmStopping", message)
        self.status.reason, self.status.message = "SlurmStopping", message
        self.store.write_status(self.status)
        self._stop_all()
        self._update_replicas(final=True)
        self.store.write_status(self.status)

    def _slurm_says(self) -> dict[str, str]:
        if not self.slurm_job:
            return {}
        try:
            job = client.SlurmClient().jobs([self.slurm_job]).get(self.slurm_job)
        except client.SlurmUnavailable:
            return {}
        return {"state": job.shown_state, "reason": job.reason or ""} if job else {}

    def _update_replicas(self, final: bool, cancelled: bool = False) -> bool:
        """Each replica's node by Slurm's name for it, its restarts counting Slurm's requeues."""
        changed = super()._update_replicas(final, cancelled)
        if changed:
            for rep in self.status.replicas:
                rep.restarts += self.restarts
                if rep.node and rep.node.startswith("node-"):
                    rep.node = self._node_name(rep.node.removeprefix("node-")) or rep.node
        return changed

    def _node_name(self, node: str) -> str | None:
        if node not in self._node_names:
            found = read_node(str(self.job_dir / SLURM_DIR / NODES_DIR / f"node-{node}.json")) or {}
            if not found.get("slurm_node"):
                return None
            self._node_names[node] = str(found["slurm_node"])
        return self._node_names[node]


def _reopened(status: JobStatus, restarts: int) -> JobStatus:
    """The status of a job Slurm requeued, as its next run starts."""
    status = dataclasses.replace(status, phase=JobPhase.PENDING, reason=None, message=None)
    status.finish_time = status.exit_code = None
    for rep in status.replicas:
        rep.phase, rep.ready, rep.exit_code, rep.reason, rep.message = (
            JobPhase.PENDING,
            False,
            None,
            None,
            None,
        )
        rep.start_time = rep.finish_time = None
    status.events.append(
        Event(
            now_iso(),
            "Warning",
            "Requeued",
            f"Slurm requeued the job: run {restarts + 1} starts (restart {restarts})",
        )
    )
    return status


def _set_aside(job_dir: Path, restarts: int) -> None:
    """A requeued run starts with no rank or node records of the last one (kept aside)."""
    aside = job_dir / SLURM_DIR / RUNS_DIR / str(restarts - 1)
    for part in (
        job_dir / contract.RANKS_DIR,
        job_dir / SLURM_DIR / NODES_DIR,
        job_dir / SLURM_DIR / STOPPED_FILE,
    ):
        if part.exists():
            aside.mkdir(parents=True, exist_ok=True)
            shutil.move(str(part), str(aside / part.name))


def _new_run(request: SlurmRequest) -> SlurmRequest:
    """``request`` for a new run of its agents: where they meet (``node.rdzv_file``) is its own."""
    run = secrets.token_hex(4)
    return dataclasses.replace(
        request, agents=[dataclasses.replace(a, env={**a.env, RUN_ENV: run}) for a in request.agents]
    )


def _on_this_node(request: SlurmRequest) -> SlurmRequest:
    """A launcher in a batch job (its own, or a kept one) reaches the keeper of that job's warm
    steps in this node's runtime dir, named for the Slurm job it runs in."""
    if request.mode == STEP or not request.warm:
        return request
    from .keeper import socket_path

    path = socket_path(os.environ.get("SLURM_JOB_ID", "0"), str(request.warm["fingerprint"]))
    return dataclasses.replace(request, warm={**request.warm, "socket": str(path)})


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m jupyter_disttrain.backends.slurm.launch JOB_DIR", file=sys.stderr)
        return 2
    job_dir = Path(argv[0]).absolute()
    request = SlurmRequest.from_json(json.loads((job_dir / "job.json").read_text())["request"])
    restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    if restarts and ended_while_kept(job_dir):
        print("the job had ended: its batch job, requeued while kept for re-runs, runs nothing", flush=True)
        return 0
    if restarts:
        _set_aside(job_dir, restarts)
    for old in (job_dir / SLURM_DIR).glob("rdzv-*.json"):
        old.unlink(missing_ok=True)
    request = _new_run(request)
    how = request.start
    if request.warm:  # forked on each node by its warm step, else a cold step
        from ..warm.plan import WarmUnavailable
        from .warmstart import start_warm

        try:
            request = _on_this_node(request)
            forked = start_warm(str(job_dir), request)
        except WarmUnavailable as exc:
            how = f"cold: one srun step per node, the warm step could not start it ({exc})"
            request = _new_run(request)  # node 0's warm step may have recorded a rendezvous none serves
        else:
            new = any(agent.answer.get("new_step") for agent in forked)
            code = SlurmSupervisor(str(job_dir), forked, None, WARM_NEW_STEP if new else WARM_STARTED).run()
            if request.keep:  # --keep-warm: the batch job waits for re-runs while its warm steps last
                keep(job_dir, request, Path(str((request.warm or {})["socket"])))
            return code
    started, how, error = start_cold(str(job_dir), request, how, "srun")
    wrapped = [SrunAgent(p, str(job_dir), i) for i, p in enumerate(started)]
    return SlurmSupervisor(str(job_dir), wrapped, error, how).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
