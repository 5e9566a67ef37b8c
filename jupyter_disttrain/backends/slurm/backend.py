"""Run jobs on Slurm: a batch job (sbatch), or job steps inside the kernel's allocation.

Which one is decided without asking: a kernel inside an allocation (``SLURM_JOB_ID`` in its
environment: ``salloc``, batchspawner) runs the job as job steps on the allocated nodes, no
queue; elsewhere, or with ``--batch``, the job is a new batch job. Either way the job is the
shared launcher (``backends/agents/``) whose agents are ``srun`` steps, one per node
(``script.py``), and the job dir, on the shared filesystem, holds every rank's log, exit and
resource samples. The
status merges those records with what Slurm says (``status.py``): the queue and its reasons,
stops Slurm made; after Slurm forgets a job (``MinJobAge``), the job dir alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from typing import Any

from ...launchers import get_launcher
from ...launchers.base import TORCHRUN, LaunchContext, replicas_of
from ...model import specs
from ...model.errors import BackendError, InvalidSpecError
from ...model.specs import Condition, DryRun, Event, JobPhase, JobSpec, JobStatus, ReplicaStatus, now_iso
from ...monitoring import guard
from ...payloads.monitoring import StackDump
from ...payloads.pools import Pool, ReleaseAnswer
from ...storage import procs
from ...storage.logfiles import LogSource, last_line, replica_sources
from ...storage.store import JobRecord, JobStore, write_record
from ..agents.request import AgentCommand, request_roles
from ..agents.spawn import START_TIMEOUT, spawn_launcher
from ..agents.supervisor import LAUNCHER_FILE
from ..base import Backend
from ..rankenv import rank_env, user_cache_dir
from ..warm.plan import fingerprint, script_imports
from . import client as slurm
from . import kept
from . import pools as warm_pools
from .allocation import Allocation, default_here
from .checks import check_batch, check_paths, check_step
from .checks import place as place_of
from .launch import CANCEL_FILE, STOPPED_FILE
from .onnode import node_of, read_ranks, step_argv
from .options import SlurmOptions, parse_options
from .request import BATCH, KEPT, STEP, SlurmRequest
from .script import (
    BATCH_SCRIPT,
    LAUNCH_MODULE,
    SLURM_DIR,
    Place,
    batch_script,
    format_request,
    node_argv,
    node_env,
    sbatch_argv,
    srun_argv,
    torchrun_argv,
)
from .status import Seen, merge, read_dict
from .stop import cancel_batch, cancel_kept, cancel_steps, stop_leftovers
from .warmstart import WARM_TIMEOUT
from .warmstart import plan as warm_plan

# Kubernetes' words for a pod: a Slurm job says the same in sbatch's.
_KUBE_WORDS = {"image": "--image", "cpu": "--cpu", "memory": "--memory", "volumes": "--pvc"}
_SLURM_WORDS = {"memory": "; use --mem (e.g. 64G)", "cpu": "; --gpus CPU processes get one CPU each"}


class SlurmBackend(Backend[SlurmOptions]):
    """sbatch or srun steps, one torchrun agent per node, c10d rendezvous on the first node."""

    name = "slurm"
    local = False
    options = SlurmOptions
    keeps_pools = True  # the warm steps of each allocation's keeper (pools.py)

    def __init__(self, store: JobStore | None = None) -> None:
        super().__init__(store)
        self.client = slurm.SlurmClient()

    # -- warm pools: the keepers' warm steps --------------------------------------------------
    def pools(self) -> list[Pool]:
        """The keepers of allocations found here, and the kept batch jobs (whose keeper runs on
        their first node: the one of a kept job seen here too is listed once, as the kept job)."""
        batch = kept.pools(self.client, self.store)
        kept_ids = {p.id.removeprefix(kept.POOL_PREFIX) for p in batch}
        return [p for p in warm_pools.pools() if p.place.rpartition(" ")[2] not in kept_ids] + batch

    def release(self, pool: Pool, force: bool = False) -> ReleaseAnswer:
        if pool.id.startswith(kept.POOL_PREFIX):
            return kept.release(self.client, pool, force)
        return warm_pools.release(pool, force)

    # -- checks and the dry run ----------------------------------------------------------------
    def _parse_options(self, options: dict[str, Any], other: str | None) -> SlurmOptions:
        return parse_options(options, other)  # its own words: flags, sizes, sbatch's

    def _validate(self, spec: JobSpec, opts: SlurmOptions) -> None:
        for key, word in _KUBE_WORDS.items():
            if getattr(spec, key):
                raise InvalidSpecError(f"{word} is a Kubernetes flag{_SLURM_WORDS.get(key, '')}")
        check_paths(spec.working_dir or os.getcwd(), str(self.store.root), sys.executable)
        if problem := slurm.missing_commands():
            raise InvalidSpecError(problem)
        allocation = None if opts.batch else Allocation.here()
        try:
            if allocation is not None:
                check_step(self.client, spec, opts, allocation)
            else:
                check_batch(self.client, spec, opts)
        except (slurm.SlurmUnavailable, slurm.SlurmCommandError) as exc:
            raise BackendError(f"cannot ask Slurm about this job: {exc}") from None

    def _dryrun(self, spec: JobSpec, job_id: str, payload: dict[str, bytes], opts: SlurmOptions) -> DryRun:
        place = place_of(self.client, spec, opts)
        keep: dict[str, Any] = {}
        if place.mode == BATCH and opts.keep_warm and not opts.cold:  # a kept batch job of its shape?
            shape = kept.shape(spec, opts, place, fingerprint(os.environ))
            found = kept.find(self.client, self.store, shape)
            if found.slurm_job:
                place = dataclasses.replace(place, mode=KEPT, allocation=found.slurm_job)
            keep = {"shape": shape, "idle": opts.keep_warm, "not_kept": found.why}
        job_dir = str(self.store.job_dir(job_id))
        working_dir = spec.working_dir or os.getcwd()
        cache = user_cache_dir()
        ctx = LaunchContext(job_dir, not place.gpu, cache, host="", port=0, loopback=False)
        roles = get_launcher(spec.launcher).roles(spec, ctx)
        if len(roles) != 1 or roles[0].via != TORCHRUN or roles[0].entry:
            raise InvalidSpecError(
                f"--launcher {spec.launcher} runs on the local and kubernetes backends, not on slurm yet "
                "(it runs torchrun jobs: --launcher torchrun or deepspeed)"
            )
        role, python = roles[0], sys.executable
        base = rank_env(
            spec,
            job_id,
            job_dir,
            cpu=not place.gpu,
            working_dir=working_dir,
            inherited=os.environ,
            role_env=role.env,
        )
        agents = [
            AgentCommand(
                node=node,
                argv=[
                    *srun_argv(spec, job_id, place, node),
                    *node_argv(python, job_dir, node, spec.nodes, opts.monitor_interval),
                    *torchrun_argv(spec, job_id, job_dir, python, role, node),
                ],
                env=node_env(base, spec, job_dir, node, place.gpu),
                role=role.name,
            )
            for node in range(spec.nodes)
        ]
        sbatch = sbatch_argv(spec, job_id, job_dir, opts, place, working_dir) if place.mode == BATCH else []
        imports = script_imports(payload.get(spec.entrypoint))
        warm, warm_steps, start = warm_plan(spec, opts, place, agents, imports)
        if keep.get("not_kept") and place.mode == BATCH:  # why not in the kept job, in the start line
            start += f"; not in a kept job: {keep['not_kept']}"
        request = SlurmRequest(
            cwd=working_dir,
            agents=agents,
            grace_period=opts.grace_period,
            exit_timeout=opts.exit_timeout,
            device="cuda" if place.gpu else "cpu",
            roles=[role.to_json()],
            cache_dir=cache,
            monitor_interval=0.0,  # the launcher sees only its own node: each node agent samples its ranks
            warm=warm.to_json() if warm else None,
            start=start,
            warm_steps=warm_steps,
            mode=place.mode,
            allocation=place.allocation,
            sbatch=sbatch,
            batch_script=batch_script(python, job_dir, sbatch) if place.mode == BATCH else "",
            slurm_version=".".join(map(str, place.version)),
            node_monitor_interval=opts.monitor_interval,
            why=self._why(place),
            guard=guard.resolve(opts, os.environ).to_json(),
            keep={k: keep[k] for k in ("shape", "idle")} if warm and place.mode == BATCH else {},
            relay=kept.relay_argv(job_id, job_dir, python, place) if place.mode == KEPT else [],
        )
        return DryRun(job_id, job_dir, self.name, request, format_request(request))

    @staticmethod
    def _why(place: Place) -> str:
        chosen = ""
        if not os.environ.get("DISTTRAIN_BACKEND") and default_here():
            chosen = (
                "slurm is the default backend here: this kernel runs in a Slurm allocation of several nodes; "
            )
        device = "one GPU per process" if place.gpu else "CPU processes (gloo)"
        if place.mode == STEP:
            return f"{chosen}job steps in allocation {place.allocation} (no queue), {device}"
        if place.mode == KEPT:
            kept_job = f"kept Slurm batch job {place.allocation}"
            return f"{chosen}in the {kept_job} (--keep-warm: no sbatch, no queue), {device}"
        inside = " (--batch: although this kernel runs in an allocation)" if Allocation.here() else ""
        return f"{chosen}a new Slurm batch job{inside}, {device}"

    def _initial_replicas(self, spec: JobSpec, request: specs.LaunchRequest) -> list[ReplicaStatus]:
        assert isinstance(request, SlurmRequest)  # this backend's own dry run made it
        return [
            ReplicaStatus(name=n, role=r, index=i) for n, r, i in replicas_of(request_roles(spec, request))
        ]

    # -- submit --------------------------------------------------------------------------------
    def _schedule(self, record: JobRecord, opts: SlurmOptions) -> None:
        request = SlurmRequest.from_json(record.request)
        job_dir = self.store.job_dir(record.id)
        (job_dir / SLURM_DIR).mkdir(exist_ok=True)
        status = self.store.read_status(record.id)
        if status is not None:  # how the job reaches Slurm, in its details (no launcher writes yet)
            status.events.append(Event(now_iso(), "Normal", "Slurm", request.why))
            self.store.write_status(status)
        if request.mode == BATCH:
            script = job_dir / SLURM_DIR / BATCH_SCRIPT
            script.write_text(request.batch_script)
            script.chmod(0o755)
            try:
                slurm_job = self.client.submit(request.sbatch)
            except slurm.SlurmCommandError as exc:
                raise BackendError(f"sbatch refused the job: {exc}") from None
            if request.keep:
                kept.mark(self.store, record.id)
        else:
            slurm_job = str(request.allocation)
        record.backend_state.update({"slurm_job_id": slurm_job, "mode": request.mode})
        self.store.write_record(record)
        if request.mode == STEP:  # a warm one may first wait for its warm step to start
            spawn_launcher(job_dir, LAUNCH_MODULE, START_TIMEOUT + (WARM_TIMEOUT if request.warm else 0))
        elif request.mode == KEPT and not kept.start_relay(job_dir, request.relay, START_TIMEOUT):
            raise BackendError(
                f"the kept Slurm job {slurm_job} ended before this job could start in it "
                "(its time limit, scancel, or idle): run it again, as a new batch job"
            )

    # -- observe -------------------------------------------------------------------------------
    def _reconcile(self, record: JobRecord, status: JobStatus) -> JobStatus:
        slurm_job = record.backend_state.get("slurm_job_id")
        if status.is_terminal or not slurm_job:
            return status
        request = SlurmRequest.from_json(record.request)
        try:
            job = self.client.jobs([slurm_job]).get(slurm_job)
            if job is None:
                job = self.client.accounting([slurm_job]).get(slurm_job)
        except slurm.SlurmUnavailable as exc:
            return _unreachable(status, exc)
        job_dir = self.store.job_dir(record.id)
        what = {BATCH: "Slurm job", KEPT: "kept Slurm job"}.get(request.mode, "allocation")
        seen = Seen(  # a job in a kept batch job is seen as a job step of an allocation
            what=f"{what} {slurm_job}",
            mode=STEP if request.mode == KEPT else request.mode,
            job=job,
            stopped=read_dict(job_dir / SLURM_DIR / STOPPED_FILE),
            launcher_alive=self._launcher_alive(record, request.mode) if request.mode != BATCH else None,
            launcher_line=last_line(job_dir / "launcher.log"),
        )
        new = merge(status, seen)
        if new.is_terminal:
            return self._write_unless_ended(new)
        return new

    def _launcher_alive(self, record: JobRecord, mode: str) -> bool | None:
        if mode == KEPT:  # its launcher is a step on the kept job's node: its srun beside the kernel
            return kept.relay_alive(self.store.job_dir(record.id))
        launcher = read_dict(self.store.job_dir(record.id) / LAUNCHER_FILE)
        return None if launcher is None else procs.is_alive(launcher)

    def _write_unless_ended(self, status: JobStatus) -> JobStatus:
        """Keep Slurm's verdict (it forgets the job later) unless the job ended meanwhile."""
        current = self.store.read_status(status.job_id)
        if current is not None and current.is_terminal:
            return current
        with contextlib.suppress(OSError):  # a full or read-only disk: the answer stands for this reader
            self.store.write_status(status)
        return status

    def _log_sources(self, record: JobRecord) -> list[LogSource]:
        return replica_sources(self.store.logs_dir(record.id))

    def _stack(self, record: JobRecord, status: JobStatus, replica: str, method: str) -> StackDump:
        from ...monitoring.stacks import dump_replica

        job_dir = self.store.job_dir(record.id)
        node = node_of(job_dir, replica)
        if node is None:
            return dump_replica(job_dir, record.id, replica, method)
        module = "jupyter_disttrain.backends.slurm.stacks"
        argv = step_argv(node, record.id, "stacks", module, str(job_dir), record.id, replica, method)
        try:
            data = json.loads(slurm.run(argv, timeout=90).strip().splitlines()[-1])
        except (slurm.SlurmCommandError, ValueError, IndexError) as exc:
            raise BackendError(f"could not read {replica}'s stacks on {node['slurm_node']}: {exc}") from None
        return StackDump(**data)

    def _debug(
        self, record: JobRecord, replica: str, request: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """Through the rank's socket, on its node (an ``srun`` step when that is not this one)."""
        from .onnode import debug

        return debug(self.store.job_dir(record.id), record.id, replica, request, timeout)

    def read_ranks(self, record: JobRecord, status: JobStatus) -> dict[str, dict[str, Any]]:
        """Each rank's debug socket on its node (``onnode.read_ranks``)."""
        return read_ranks(self.store, record, status)

    # -- stop ----------------------------------------------------------------------------------
    def _cancel_existing(self, record: JobRecord) -> None:
        request = SlurmRequest.from_json(record.request)
        job_dir = self.store.job_dir(record.id)
        write_record(job_dir / SLURM_DIR / CANCEL_FILE, {"by": "user", "time": now_iso()})
        slurm_job = record.backend_state.get("slurm_job_id")
        if request.mode == BATCH and slurm_job:
            cancel_batch(self.client, self.store, record, slurm_job, request.grace_period)
        elif request.mode == KEPT and slurm_job:
            cancel_kept(self.client, self.store, record, slurm_job, request.grace_period)
        elif slurm_job:
            cancel_steps(self.client, self.store, record, request.grace_period)
        status = self.store.read_status(record.id) or JobStatus(job_id=record.id)
        if not status.is_terminal:
            self.store.write_status(status.end(JobPhase.CANCELLED, "Cancelled", "cancelled by the user"))

    def _stop_leftovers(self, record: JobRecord) -> None:
        if (self.store.job_dir(record.id) / SLURM_DIR / kept.KEPT_FILE).exists():
            return  # its batch job is kept for re-runs: a pool, released as one
        stop_leftovers(self.client, record)

    # Last in the class: as a method name, ``list`` would shadow the builtin in later annotations.
    def list(self, records: list[JobRecord] | None = None) -> list[JobStatus]:
        """As ``Backend.list``, asking Slurm once for every job not ended."""
        if records is None:
            records = self.store.records()
        mine = [
            (r, self.store.read_status(r.id) or JobStatus(job_id=r.id, created=r.created))
            for r in records
            if r.spec.backend == self.name
        ]
        asked = {
            r.backend_state["slurm_job_id"]
            for r, s in mine
            if not s.is_terminal and r.backend_state.get("slurm_job_id")
        }
        if asked:
            with contextlib.suppress(slurm.SlurmUnavailable):  # then each job says so
                self.client.jobs(asked, fresh=True)  # each job's _reconcile reads this answer
        return [self._reconcile(r, s) for r, s in mine]


def _unreachable(status: JobStatus, exc: Exception) -> JobStatus:
    """The job dir's status, saying that Slurm could not be asked (nothing is decided on that)."""
    condition = Condition("SlurmReachable", "False", "Unavailable", str(exc), now_iso())
    view = JobStatus.from_dict(status.to_dict())
    view.conditions = [c for c in view.conditions if c.type != "SlurmReachable"] + [condition]
    if view.reason is None:
        view.reason, view.message = "SlurmUnreachable", f"{exc}; showing the job dir's status"
    return view
