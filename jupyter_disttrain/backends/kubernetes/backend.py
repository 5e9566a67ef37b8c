"""``KubernetesBackend``: ``%%distrun --backend kubernetes`` as a Job, PyTorchJob or T9k job.

The backend's hooks over its parts: ``planning`` decides everything and builds the manifests
(the dry run), ``objects`` creates exactly those and removes them, ``reconcile`` reads the
status from the process-wide informers (one watch per namespace and kind); logs come from the
shared PVC or ``pods/log``, stacks from ``pods/exec``, resources from the pods' own samples or
the metrics API.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...model.errors import BackendError, InvalidSpecError
from ...model.specs import (
    DryRun,
    Event,
    JobPhase,
    JobSpec,
    JobStatus,
    LaunchRequest,
    LogLine,
    ReplicaStatus,
    now_iso,
)
from ...monitoring.resources import ReplicaState, quiet_replicas, read_resources, sampled_replicas
from ...payloads.monitoring import Resources, StackDump
from ...payloads.pools import Pool, PoolList, ReleaseAnswer
from ...storage.logfiles import Budget
from ...storage.store import JobRecord, JobStore
from ..base import Backend
from ..logaccess import LogQuery
from . import manifests as mf
from . import podruntime, pools, poolstatus
from .client import ApiError, ClusterAccess, KubeClient
from .flavors import flavor_named
from .objects import JobObjects
from .options import KubeOptions, parse_options
from .pending import note_queue, queue_hold
from .planning import SCRATCH_CHECKPOINTS, Planner, check_spec, device_line
from .podlogs import pod_log_lines
from .podscript import POD_STACKS
from .poolspaces import JobNamespaces
from .rankpods import RankPods, rank_pods
from .reconcile import Reconciler, pods_informer
from .request import KubeRequest


class KubernetesBackend(Backend[KubeOptions]):
    """Runs each job as pods on a Kubernetes cluster, torchrun in every pod."""

    name = "kubernetes"
    options = KubeOptions
    keeps_pools = True  # --keep-warm: a job's pods kept as a warm pool (pools.py)

    def __init__(self, store: JobStore | None = None, client: KubeClient | None = None) -> None:
        super().__init__(store)
        self.cluster = ClusterAccess(client)
        self.planner = Planner(self.cluster, self.store, self.name)
        self.objects = JobObjects(self.cluster, self.store)
        self.reconciler = Reconciler(self.cluster, self.store, self.objects.remove, self.resolve_options)
        self.namespaces = JobNamespaces(self.store, self.name)

    def client(self, required: bool = True) -> KubeClient | None:
        """The API client (kubeconfig or in-cluster); ``None`` when there is no cluster and not required."""
        return self.cluster.required() if required else self.cluster.optional()

    # -- submit ----------------------------------------------------------------------------
    def _parse_options(self, options: dict[str, Any], other: str | None) -> KubeOptions:
        return parse_options(options, other)  # its own words: object names, quantities, flavours

    def _validate(self, spec: JobSpec, opts: KubeOptions) -> None:
        check_spec(spec)

    def _dryrun(self, spec: JobSpec, job_id: str, payload: dict[str, bytes], opts: KubeOptions) -> DryRun:
        return self.planner.dryrun(spec, job_id, payload, opts)

    def _initial_replicas(self, spec: JobSpec, request: LaunchRequest) -> list[ReplicaStatus]:
        assert isinstance(request, KubeRequest)
        return flavor_named(request.flavor).replicas(spec)

    def _schedule(self, record: JobRecord, opts: KubeOptions) -> None:
        request = KubeRequest.from_json(record.request)
        if request.logs_on_pvc:  # beside the script, where the pod wrapper looks for it
            (self.store.job_dir(record.id) / podruntime.ARCHIVE).write_bytes(podruntime.archive())
        start = self._fork_in_pool(record, request)
        if start is None:
            return
        try:
            created = self.objects.create(request)
        except ApiError as exc:
            if exc.status == 409:
                raise BackendError(f"{exc}; a job named {record.id!r} already exists in the cluster") from exc
            raise
        server = self.cluster.required().host
        record.backend_state.update(
            {"namespace": request.namespace, "flavor": request.flavor, "server": server}
        )
        self.store.write_record(record)
        status = self.store.read_status(record.id)
        if status is not None:  # the job's details say which accelerator it got, and why
            line = device_line(record.spec.nproc_per_node, request)
            status.events.append(Event(now_iso(), "Normal", "Accelerator", line))
            if start:  # how it started, when pools were asked (--keep-warm, --cold, a pool of its shape)
                status.events.append(Event(now_iso(), "Normal", "Started", start))
            if not request.job_dir_on_pvc:
                status.events.append(Event(now_iso(), "Warning", "ScratchCheckpoints", SCRATCH_CHECKPOINTS))
            # Created suspended (Kueue's webhook): queued from the start, whoever looks next.
            note_queue(status, queue_hold(flavor_named(request.flavor), created[-1], []))
            self.store.write_status(status)

    def _fork_in_pool(self, record: JobRecord, request: KubeRequest) -> str | None:
        """Fork the job in a warm pool of its shape (None: it runs there, no object is created);
        else how it starts cold, and why."""
        client = self.cluster.required()
        forked, said = pools.fork(client, record.id, record.spec, request)
        if forked is None:
            return said
        record.backend_state.update(
            {"namespace": request.namespace, "flavor": request.flavor, "server": client.host}
        )
        # pool_pod: node 0's (its exit record is the job's verdict); pool_pods: every node's, in order.
        state = {"pool_pod": forked.pods[0], "pool_pods": forked.pods, "pool": forked.pool}
        record.backend_state.update({**state, "replica": forked.replica})
        self.store.write_record(record)
        status = self.store.read_status(record.id)
        if status is not None:
            where = (
                f"pool pod {forked.pods[0]}"
                if len(forked.pods) == 1
                else f"pool pods {', '.join(forked.pods)}"
            )
            line = f"warm: forked in {where}: no new pod, no torch import"
            status.events.append(Event(now_iso(), "Normal", "Started", line))
            self.store.write_status(status)
        return None

    # -- pools -----------------------------------------------------------------------------
    def pools(self) -> list[Pool]:
        return self.pool_list().pools

    def pool_list(self) -> PoolList:
        """The pools of every namespace this user's jobs ran in, and the default one; a namespace
        that cannot be listed (RBAC) is a note, the others are listed (``poolspaces.py``)."""
        client = self.cluster.optional()
        if client is None:
            return PoolList([], [])
        namespaces, note = self.namespaces.namespaces(self.planner.default_namespace())
        found, notes = [], [note] if note else []
        for namespace in namespaces:
            try:
                found += pools.pools(client, namespace)
            except BackendError as exc:
                notes.append(str(exc))
        return PoolList(found, notes)

    def release(self, pool: Pool, force: bool = False) -> ReleaseAnswer:
        if pool.namespace is None:  # not one of pools(): each names its pods' namespace
            raise BackendError(f"pool {pool.id} names no namespace: list the pools again")
        return pools.release(self.cluster.required(), pool, pool.namespace, force)

    # -- observe ---------------------------------------------------------------------------
    def _reconcile(self, record: JobRecord, status: JobStatus) -> JobStatus:
        return self.reconciler.reconcile(record, status)

    def _streamed_logs(self, record: JobRecord, query: LogQuery) -> Iterator[LogLine] | None:
        """The pods' own logs (``pods/log``) when the job dir is not on a shared PVC; else the
        log files there (they outlive the pods)."""
        if self._logs_in_files(record.id):
            return None
        return self.pod_logs(
            record.id,
            query.replica,
            follow=query.follow,
            tail=query.tail,
            offset=query.offset,
            budget=query.budget,
        )

    def _logs_in_files(self, job_id: str) -> bool:
        """Whether the job's output is in log files of the job dir (on the shared PVC, or never
        launched), or kept there when the pods were deleted: else it lives only in its pods,
        read through ``pods/log``."""
        record = self.store.read_record(job_id)
        state = record.backend_state
        if "namespace" not in state:
            return True  # never launched
        return KubeRequest.from_json(record.request).logs_on_pvc or bool(state.get("logs_kept"))

    def pod_logs(
        self,
        job_id: str,
        replica: str | None = None,
        *,
        follow: bool = False,
        tail: int | None = None,
        offset: str | int | None = None,
        since: int | None = None,
        budget: Budget | None = None,
    ) -> Iterator[LogLine]:
        """Lines from ``pods/log`` of the job's pods, each tagged with its replica."""
        record = self.store.read_record(job_id)
        client = self.cluster.required()
        ns, flavor = record.backend_state["namespace"], flavor_named(record.backend_state["flavor"])
        pods = pods_informer(client, ns)
        pods.wait_synced()
        return pod_log_lines(
            client,
            pods,
            record,
            flavor,
            replica=replica,
            follow=follow,
            tail=tail,
            offset=offset,
            since=since,
            is_done=lambda: self.describe(job_id).is_terminal,
            budget=budget,
        )

    # -- resources -------------------------------------------------------------------------
    def _resources(
        self, record: JobRecord, status: JobStatus, replicas: list[ReplicaState], since: float | None
    ) -> Resources:
        """The pods' own samples of their ranks when the job dir is on the shared PVC, else the
        cluster's metrics API (CPU and memory per pod), else a message saying why there is none."""
        job_dir = self.store.job_dir(record.id)
        if KubeRequest.from_json(record.request).logs_on_pvc:
            return read_resources(job_dir, _sampled_ranks(job_dir, status.is_terminal), since)
        from .podmetrics import pod_resources

        state = record.backend_state
        client = self.cluster.optional()
        if client is None or "namespace" not in state:
            return read_resources(job_dir, [], since, message="the job has no pods to measure")
        ns, flavor = state["namespace"], flavor_named(state["flavor"])
        pods = pods_informer(client, ns)
        pods.wait_synced()
        by_name = {p["metadata"]["name"]: p for p in pods.indexed(record.id)}
        selector = f"{mf.JOB_ID_LABEL}={record.id}"
        ended = status.is_terminal
        return pod_resources(client, ns, selector, record.id, flavor, ended, since, time.time(), by_name)

    def _quiet(self, record: JobRecord, status: JobStatus) -> list[str]:
        """The ranks the pods' samplers flag quiet when the job dir is on the shared PVC; none
        otherwise (the metrics API notes no output times, and a listing makes no cluster call)."""
        if not KubeRequest.from_json(record.request).logs_on_pvc:
            return []
        job_dir = self.store.job_dir(record.id)
        return quiet_replicas(job_dir, _sampled_ranks(job_dir, False), self.series_tails)

    # -- stacks ------------------------------------------------------------------------------
    def _stack(self, record: JobRecord, status: JobStatus, replica: str, method: str) -> StackDump:
        """py-spy in the replica's pod through ``pods/exec``: the stacks of each rank it runs."""
        if method == "faulthandler":
            raise InvalidSpecError(
                "on Kubernetes the stacks are read by py-spy in the pod; leave out --method faulthandler"
            )
        from .podexec import exec_in_pod

        where = self._rank_pods(record)
        pod = where.pods.get(replica)
        if pod is None:
            raise BackendError(f"{replica} has no pod now: no process to read")
        argv = ["python3", "-c", POD_STACKS, record.id]
        text = exec_in_pod(
            self.cluster.required(), where.namespace, pod["metadata"]["name"], where.container, argv
        )
        return StackDump(replica, "py-spy", text, None)

    def _rank_pods(self, record: JobRecord) -> RankPods:
        """The pods that run the job's ranks now: its own, or the pool pods it was forked in."""
        return rank_pods(self.cluster.required(), record, str(self.store.job_dir(record.id)))

    def _debug(
        self, record: JobRecord, replica: str, request: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """The relay in the rank's pod through ``pods/exec`` (``podrelay.py``)."""
        from .podrelay import debug_in_pod

        where, nproc = self._rank_pods(record), record.spec.nproc_per_node
        return debug_in_pod(self.cluster.required(), where, replica, nproc, request, timeout)

    def read_ranks(self, record: JobRecord, status: JobStatus) -> dict[str, dict[str, Any]]:
        """Each rank's debug socket in its pod, through ``pods/exec``: the collector of the job's
        own runtime (``disttrain_runtime.debugsock``, shipped beside the script) run there. A
        pod that cannot be read names its ranks' reason; the others are still read."""
        import json

        from .podexec import exec_in_pod
        from .podscript import POD_DIAGNOSE

        client = self.cluster.required()
        on_pvc = bool(record.request.get("job_dir_on_pvc"))
        runtime = podruntime.archive_path(str(self.store.job_dir(record.id)) if on_pvc else mf.CODE_DIR)
        where = self._rank_pods(record)
        answers: dict[str, dict[str, Any]] = {}
        for replica, pod in sorted(where.pods.items()):
            argv = ["python3", "-c", POD_DIAGNOSE, runtime, where.job_dir]
            try:
                found = json.loads(
                    exec_in_pod(client, where.namespace, pod["metadata"]["name"], where.container, argv)
                )
            except (BackendError, ValueError) as exc:
                found = {
                    replica: {"fr": None, "stack": None, "errors": {"fr_trace_json": f"pod unread: {exc}"}}
                }
            for name, answer in found.items():  # a shared job dir shows other pods' sockets too
                if answer.get("fr") or answer.get("stack") or name not in answers:
                    answers[name] = {**answer, "method": "socket"}
        return answers

    # -- stop ------------------------------------------------------------------------------
    def _cancel_existing(self, record: JobRecord) -> None:
        state = record.backend_state
        if state.get("pool_pod"):  # forked in a pool pod: its wrapper is stopped, the pool stays
            pods = poolstatus.pool_pods_of(state)
            pools.signal_job(self.cluster.required(), state["namespace"], pods, record.id, 15)
        else:
            self.objects.remove(record)
        status = self.store.read_status(record.id) or JobStatus(job_id=record.id, created=record.created)
        message = "cancelled by the user; the workload and its pods were deleted, files stay"
        status.end(JobPhase.CANCELLED, "Cancelled", message)
        for rep in status.replicas:
            if not rep.phase.is_terminal:
                rep.phase = JobPhase.CANCELLED
        status.events.append(Event(now_iso(), "Normal", "Cancelled", "workload, pods and Service deleted"))
        self.store.write_status(status)

    def _delete_existing(self, record: JobRecord) -> None:
        if not record.backend_state.get("pool_pod"):  # a forked job's pod is the pool's
            self.objects.remove(record)


def _sampled_ranks(job_dir: Path, ended: bool) -> list[ReplicaState]:
    """The ranks the pods' samplers wrote series of (the pods' own replicas are not ranks)."""
    return [ReplicaState(name, ended, None) for name in sampled_replicas(job_dir)]
