"""Run jobs as torchrun processes on this machine — the default backend.

Each job gets a launcher process (``launch``, then ``supervisor``) in its own session: it survives the
kernel, keeps ``status.json`` current and stops the whole process tree on cancel. Ranks write
their output straight into ``logs/rank-<N>.log``; torchrun's own messages go to
``logs/agent-<node>.log``.
"""

from __future__ import annotations

import os
import shlex
import socket
import time
from pathlib import Path
from typing import Any

from ...launchers import get_launcher
from ...launchers.base import TORCHRUN, LaunchContext, replicas_of
from ...model.errors import InvalidSpecError
from ...model.specs import DryRun, JobPhase, JobSpec, JobStatus, LaunchRequest, ReplicaStatus, iso_seconds
from ...monitoring import guard
from ...payloads.monitoring import StackDump
from ...runtime import contract
from ...storage import procs
from ...storage.logfiles import LogSource, replica_sources
from ...storage.store import JobRecord, read_json
from ..agents.request import AgentCommand, LocalRequest, request_roles
from ..agents.spawn import START_TIMEOUT, spawn_launcher
from ..agents.supervisor import LAUNCHER_FILE
from ..base import Backend
from ..rankenv import ensure_runtime_path, runtime_path, user_cache_dir
from ..warm.plan import SPAWN_TIMEOUT, JobShape, WarmPlan, ensure_zygote, script_imports
from ..warm.plan import plan as warm_plan
from .devices import cpu_count, job_gpus
from .options import LocalOptions
from .python import foreign, job_python
from .roles import role_commands
from .torchrun import LOOPBACK, RUN_SH, agent_commands, by_hand_script

# The launcher records itself once its agents started: a warm one may first wait for a zygote
# still importing (SPAWN_TIMEOUT), as on a loaded machine right after %load_ext.
_LAUNCH_TIMEOUT = START_TIMEOUT + SPAWN_TIMEOUT
# A job with no launcher record this long after it was created, and no process, never will have
# one: its submit was cut short (the server or kernel killed between writing job.json and
# starting the launcher). Well past the time the submit itself waits for its launcher.
NEVER_LAUNCHED_AFTER = _LAUNCH_TIMEOUT + 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalBackend(Backend[LocalOptions]):
    """torchrun on this machine: one process per GPU, or CPU processes with gloo."""

    name = "local"
    local = True
    options = LocalOptions

    def _validate(self, spec: JobSpec, opts: LocalOptions) -> None:
        gpus = job_gpus(spec.accelerator)
        cpus = cpu_count()
        processes = get_launcher(spec.launcher).processes(spec)
        if not gpus and not opts.oversubscribe and processes > cpus:
            sizes = f"--gpus {spec.nproc_per_node} --nodes {spec.nodes}"
            if processes != spec.world_size:
                sizes = f"--launcher {spec.launcher} --workers {processes}"
            raise InvalidSpecError(
                f"{sizes} starts {processes} processes and this machine has {cpus} CPUs: "
                "start fewer, or pass --oversubscribe"
            )
        if spec.accelerator == "cpu":
            return
        if spec.accelerator == "gpu" and not gpus:
            raise InvalidSpecError(
                "this machine has no GPU: leave out --accelerator gpu to run CPU processes"
            )
        if gpus and spec.world_size > len(gpus):
            raise InvalidSpecError(
                f"--gpus {spec.nproc_per_node} --nodes {spec.nodes} needs {spec.world_size} GPUs and this "
                f"machine has {len(gpus)}: lower --gpus, or use --backend kubernetes"
            )

    def _dryrun(self, spec: JobSpec, job_id: str, payload: dict[str, bytes], opts: LocalOptions) -> DryRun:
        job_dir = self.store.job_dir(job_id)
        gpus = job_gpus(spec.accelerator) or None
        cache = user_cache_dir()
        ctx = LaunchContext(str(job_dir), gpus is None, cache, host=LOOPBACK, port=free_port())
        roles = get_launcher(spec.launcher).roles(spec, ctx)
        python = job_python(opts.python)
        where: dict[str, Any] = {
            "python": python,
            "gpu_ids": gpus,
            "working_dir": spec.working_dir or os.getcwd(),
            "runtime_path": runtime_path(cache) if foreign(python) else None,
        }
        agents: list[AgentCommand] = []
        for role in roles:
            if role.via == TORCHRUN:
                port = free_port() if spec.nodes > 1 else None
                agents += agent_commands(spec, job_id, str(job_dir), rdzv_port=port, role=role, **where)
            else:
                agents += role_commands(spec, job_id, str(job_dir), role, **where)
        shape = JobShape(
            max_restarts=spec.max_restarts,
            torchrun_only=all(role.via == TORCHRUN for role in roles),
            foreign_python=foreign(python),
            cold=opts.cold,
            nodes=spec.nodes,
        )
        warm, start = warm_plan(
            env=os.environ,  # what the launcher, and so the job, inherits
            job_env=agents[0].env if agents else {},
            shape=shape,
            imports=script_imports(payload.get(spec.entrypoint)),
        )
        request = LocalRequest(
            cwd=spec.working_dir or os.getcwd(),
            agents=agents,
            grace_period=opts.grace_period,
            exit_timeout=opts.exit_timeout,
            device="cuda" if gpus else "cpu",
            roles=[role.to_json() for role in roles],
            cache_dir=cache,
            monitor_interval=opts.monitor_interval,
            warm=warm.to_json() if warm else None,
            start=start,
            guard=guard.resolve(opts, os.environ).to_json(),
        )
        return DryRun(job_id, str(job_dir), self.name, request, format_request(request))

    def _initial_replicas(self, spec: JobSpec, request: LaunchRequest) -> list[ReplicaStatus]:
        assert isinstance(request, LocalRequest)  # this backend's own dry run made it
        roles = request_roles(spec, request)
        return [ReplicaStatus(name=name, role=role, index=i) for name, role, i in replicas_of(roles)]

    def _schedule(self, record: JobRecord, opts: LocalOptions) -> None:
        job_dir = self.store.job_dir(record.id)
        request = LocalRequest.from_json(record.request)
        python = job_python(opts.python)
        if foreign(python) and request.cache_dir:
            ensure_runtime_path(runtime_path(request.cache_dir))
        (job_dir / RUN_SH).write_text(by_hand_script(request.agents, request.cwd))
        if request.warm:  # its imports run while the launcher starts
            ensure_zygote(WarmPlan.from_json(request.warm), os.environ)
        spawn_launcher(job_dir, procs.LAUNCHER_MODULE, _LAUNCH_TIMEOUT)

    def _reconcile(self, record: JobRecord, status: JobStatus) -> JobStatus:
        if status.is_terminal:
            return status
        launcher = self._launcher(record)
        if launcher is None:
            return _never_launched(self.store.job_dir(record.id), record, status)
        if procs.is_alive(launcher):
            return status
        # The launcher is gone without writing an end: it was killed (OOM killer, reboot...).
        status = self.store.read_status(record.id) or status  # it may have just finished
        if status.is_terminal:
            return status
        # Worked out on each read, never written: a reader must work on a full or read-only
        # disk, and two readers must not race to write the record.
        message = f"the job's launcher process (pid {launcher['pid']}) ended without a result"
        status.end(JobPhase.FAILED, "LauncherLost", message, at=status.updated)  # its last sign of life
        for rep in status.replicas:
            if not rep.phase.is_terminal:
                _end_lost_replica(self.store.job_dir(record.id), record.id, rep, status.finish_time)
        return status

    def _launcher(self, record: JobRecord) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = read_json(self.store.job_dir(record.id) / LAUNCHER_FILE)
            return data
        except (OSError, ValueError):
            return None

    def _stop_leftovers(self, record: JobRecord) -> None:
        grace = LocalRequest.from_json(record.request).grace_period
        procs.stop_processes(procs.job_processes(record.id), grace)

    def _cancel_existing(self, record: JobRecord) -> None:
        grace = LocalRequest.from_json(record.request).grace_period
        launcher = self._launcher(record)
        if launcher and procs.is_alive(launcher):
            os.kill(int(launcher["pid"]), 15)
            deadline = time.monotonic() + grace + 15
            while time.monotonic() < deadline and procs.is_alive(launcher):
                time.sleep(0.05)
        # Whatever survived a lost or stuck launcher goes too, and the record says so.
        procs.stop_processes(procs.job_processes(record.id), grace)
        status = self.store.read_status(record.id) or JobStatus(job_id=record.id)
        if not status.is_terminal:
            self.store.write_status(status.end(JobPhase.CANCELLED, "Cancelled", "cancelled by the user"))

    def _stack(self, record: JobRecord, status: JobStatus, replica: str, method: str) -> StackDump:
        from ...monitoring.stacks import dump_replica

        return dump_replica(self.store.job_dir(record.id), record.id, replica, method)

    def read_ranks(self, record: JobRecord, status: JobStatus) -> dict[str, dict[str, Any]]:
        """Each replica's debug socket (its Flight Recorder and stacks; py-spy or faulthandler
        for its stacks where that gives none): processes of this machine."""
        from ...monitoring.incidents import collect_here

        return collect_here(self.store.job_dir(record.id), record.id, [r.name for r in status.replicas])

    def _log_sources(self, record: JobRecord) -> list[LogSource]:
        return replica_sources(self.store.logs_dir(record.id))


def _never_launched(job_dir: Path, record: JobRecord, status: JobStatus) -> JobStatus:
    """A job without a launcher record: being launched, or (``NEVER_LAUNCHED_AFTER`` past its
    creation, with no process of it left) never launched, Failed. Worked out on each read, never
    written, as a lost launcher is."""
    young = time.time() - iso_seconds(record.created) < NEVER_LAUNCHED_AFTER
    if young or procs.works_for(record.id, job_dir):
        return status
    message = (
        f"the job was never launched: no launcher started within {NEVER_LAUNCHED_AFTER:.0f} s of its "
        "submission (was the submitting server or kernel stopped?); submit it again"
    )
    status.end(JobPhase.FAILED, "NeverLaunched", message, at=status.updated or record.created)
    for rep in status.replicas:
        if not rep.phase.is_terminal:
            rep.ready, rep.finish_time = False, status.finish_time
            rep.phase, rep.reason = JobPhase.FAILED, "NeverLaunched"
            rep.message = "its job was never launched"
    return status


def _end_lost_replica(job_dir: Path, job_id: str, rep: ReplicaStatus, at: str | None) -> None:
    """How a replica of a job whose launcher died stands: as its record ends it, Running while
    its process lives (a rank that ignored the SIGTERM), else ended with the launcher."""
    try:
        rec = read_json(job_dir / contract.RANKS_DIR / contract.record_file(rep.name))
    except (OSError, ValueError):
        rec = {}
    code = rec.get("exit_code")
    if code is None and isinstance(rec.get("pid"), int) and procs.runs_job(rec["pid"], job_id):
        return
    rep.ready, rep.finish_time = False, rec.get("finish_time") or rep.finish_time or at
    if isinstance(code, int):
        rep.phase, rep.exit_code = (JobPhase.SUCCEEDED if code == 0 else JobPhase.FAILED), code
    else:
        rep.phase, rep.reason = JobPhase.FAILED, "LauncherLost"
        rep.message = "no process left: it ended with the job's launcher"


def format_request(request: LocalRequest) -> str:
    """The launch request as a person reads it: one shell-quoted command line per agent."""
    lines = [f"# working dir: {request.cwd}  (device: {request.device})"]
    if request.start:
        lines.append(f"# start: {request.start}")
    lines.append(f"# guard: {guard.GuardSettings.from_json(request.guard).describe()}")
    for agent in request.agents:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(agent.env.items()))
        lines.append(f"# {agent.replica}" if agent.replica else f"# node {agent.node}")
        lines.append(f"env {env} \\\n  {shlex.join(agent.argv)}")
    lines.append(f"# ---- {RUN_SH}, written next to the script: runs it by hand as the job did ----")
    lines.append(by_hand_script(request.agents, request.cwd).rstrip("\n"))
    return "\n".join(lines)
