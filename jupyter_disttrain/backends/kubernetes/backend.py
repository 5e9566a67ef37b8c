"""``KubernetesBackend``: ``%%distrun --backend kubernetes`` as a Job, PyTorchJob or T9k job.

``dryrun`` decides everything (flavour, namespace, image, volumes, server-version gates) and
builds the manifests; ``submit`` creates exactly those. Status comes from the process-wide
informers (one watch per namespace and kind), logs from the shared PVC or ``pods/log``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from ...errors import BackendError, InvalidSpecError
from ...launchers import get_launcher
from ...launchers.base import TORCHRUN, LaunchContext
from ...logfiles import Budget
from ...monitoring.resources import ReplicaState, quiet_replicas, read_resources, sampled_replicas
from ...payloads import Resources, StackDump
from ...specs import (
    DryRun,
    Event,
    JobPhase,
    JobSpec,
    JobStatus,
    LaunchRequest,
    LogLine,
    ReplicaStatus,
    Volume,
    now_iso,
)
from ...store import JobRecord, JobStore
from ..base import Backend
from . import manifests as mf
from .claims import check_claims
from .client import BY_KIND, EVENTS, PODS, ApiError, KubeClient
from .exits import read_exits, status_from_exits
from .flavors import Flavor, discover, flavor_named, process_roles
from .informer import Informer, informer
from .notebook import choose_accelerator, find_own_pod, notebook_container, security_contexts
from .options import KubeOptions, parse_options, parse_quantity
from .pending import PendingClock, timed_out
from .podlogs import keep_pod_logs, pod_log_lines
from .podscript import POD_STACKS
from .request import KubeRequest
from .status import build_status, conditions_of, pods_settled

# Gates for Job fields when no cluster can be asked (dry run with explicit flags); see docs.
log = logging.getLogger(__name__)
DEFAULT_K8S_VERSION = (1, 29)
_CLAIM = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
# How long an ended workload waits for its pods' last status before it is final anyway.
SETTLE_SECONDS = 10.0


class KubernetesBackend(Backend):
    """Runs each job as pods on a Kubernetes cluster, torchrun in every pod."""

    name = "kubernetes"
    options = KubeOptions

    def __init__(self, store: JobStore | None = None, client: KubeClient | None = None) -> None:
        super().__init__(store)
        self._client = client
        self._client_loaded = client is not None
        self._ended_at: dict[str, float] = {}  # job id -> when its workload's end was first seen
        self._pending = PendingClock()

    # -- the cluster -----------------------------------------------------------------------
    def client(self, required: bool = True) -> KubeClient | None:
        """The API client (kubeconfig or in-cluster); ``None`` when there is no cluster and not required."""
        if not self._client_loaded:
            self._client = KubeClient.from_environment()
            self._client_loaded = True
        if self._client is None and required:
            raise BackendError(
                "no Kubernetes cluster is configured: run in a pod with a service account or set KUBECONFIG "
                "(a --dry-run needs only --flavor and --image)"
            )
        return self._client

    def notebook_pod(self) -> tuple[dict[str, Any] | None, str]:
        """This kernel's own pod, read from the API, and how it was found (or why it was not)."""
        client = self.client(required=False)
        if client is None:
            return None, "no Kubernetes cluster is configured to read it from"
        return find_own_pod(client, os.environ)

    # -- submit ----------------------------------------------------------------------------
    def _validate(self, spec: JobSpec) -> None:
        parse_options(spec.options)
        for flag, value in (("--cpu", spec.cpu), ("--memory", spec.memory)):
            if value is not None:
                parse_quantity(value, flag)
        for v in spec.volumes:
            if not _CLAIM.match(v.claim):
                raise InvalidSpecError(f"--pvc {v.claim}:{v.mount_path}: {v.claim!r} is not a claim name")
            if not v.mount_path.startswith("/") or ".." in v.mount_path.split("/"):
                raise InvalidSpecError(f"--pvc {v.claim}:{v.mount_path}: the mount path must be absolute")

    def placement(
        self, spec: JobSpec, job_id: str, opts: KubeOptions, default_flavor: str | None = None
    ) -> mf.Placement:
        """Decide namespace, image, volumes, flavour and version gates; ask the cluster only when
        needed. ``default_flavor``: the flavour without ``--flavor``, else the one discovered."""
        client = self.client(required=opts.flavor is None and default_flavor is None)
        pod, found = self.notebook_pod()
        pod_spec = (pod or {}).get("spec", {})
        container = notebook_container(pod, spec.working_dir, os.environ) if pod else {}
        image = spec.image or container.get("image")
        if not image:
            raise InvalidSpecError(
                "no image: pass --image (the default is the notebook pod's image, but that pod was not "
                f"found: {found})"
            )
        namespace = _namespace(opts, pod, client)
        volumes = _merge_volumes(_pod_volumes(pod_spec, container), spec.volumes)
        if client is not None:
            check_claims(client, namespace, volumes, spec.nodes, opts.colocate)
        node = _colocation(opts, pod, found)
        flavor = opts.flavor or default_flavor or self.discover_flavor()
        version = (
            opts.k8s_version or (self._server_version(client) if client else None) or DEFAULT_K8S_VERSION
        )
        secrets = tuple(s["name"] for s in pod_spec.get("imagePullSecrets", []) or [] if s.get("name"))
        gpu, why = choose_accelerator(spec.accelerator, container if pod else None)
        pod_security, container_security = security_contexts(pod, container, opts.run_as_root)
        return mf.Placement(
            namespace=namespace,
            image=image,
            flavor=flavor,
            k8s_version=version,
            job_dir=str(self.store.job_dir(job_id)),
            volumes=tuple(volumes),
            image_pull_secrets=secrets,
            gpu=gpu,
            accelerator_reason=why,
            notebook=_inherited_from(pod, container, found),
            node=node,
            pod_security=pod_security,
            container_security=container_security,
        )

    def discover_flavor(self) -> str:
        """``pytorchjob`` if the Kubeflow operator's API is served, else ``t9k`` if T9k's, else ``job``."""
        client = self.client()
        assert client is not None
        groups = client.api_groups()
        return discover(lambda res: client.has_resource(res, groups)).name

    @staticmethod
    def _server_version(client: KubeClient) -> tuple[int, int] | None:
        try:
            return client.server_version()
        except ApiError:
            return None

    def _dryrun(self, spec: JobSpec, job_id: str, payload: dict[str, bytes]) -> DryRun:
        opts = parse_options(spec.options)
        # A pod per replica of a parameter-server job: plain Jobs, which every cluster runs.
        per_replica = bool(process_roles(spec))
        place = self.placement(spec, job_id, opts, "job" if per_replica else None)
        flavor = flavor_named(place.flavor)
        ctx = self._launch_context(spec, job_id, place, flavor, per_replica)
        roles = get_launcher(spec.launcher).roles(spec, ctx)
        if not per_replica and (len(roles) != 1 or roles[0].via != TORCHRUN):
            raise InvalidSpecError(f"the kubernetes backend cannot run the {spec.launcher} launcher's roles")
        place = dataclasses.replace(place, role=roles[-1], roles=tuple(roles))
        request = KubeRequest(
            flavor=place.flavor,
            namespace=place.namespace,
            k8s_version=f"{place.k8s_version[0]}.{place.k8s_version[1]}",
            manifests=flavor.manifests(spec, job_id, opts, place, dict(payload)),
            logs_on_pvc=flavor.logs_on_pvc(place),
            device="cuda" if place.gpu else "cpu",
            device_reason=place.accelerator_reason,
            notebook_pod=place.notebook,
            roles=[role.to_json() for role in roles],
        )
        header = (
            f"# jupyter-disttrain job {job_id}: flavor {place.flavor}, namespace {place.namespace}, "
            f"Job fields gated for Kubernetes {place.k8s_version[0]}.{place.k8s_version[1]}\n"
            f"# {_device_line(spec.nproc_per_node, request)}\n"
        )
        if place.notebook:
            header += f"# inherited from the notebook: {place.notebook}\n"
        if place.pvc_for_job_dir is None:
            header += (
                "# the job dir is not on a mounted PVC: the script ships in a ConfigMap, logs via pods/log\n"
            )
        text = header + yaml.dump_all(request.manifests, Dumper=_Dumper, sort_keys=False, width=110)
        return DryRun(job_id=job_id, job_dir=place.job_dir, backend=self.name, request=request, text=text)

    @staticmethod
    def _launch_context(
        spec: JobSpec, job_id: str, place: mf.Placement, flavor: Flavor, per_replica: bool
    ) -> LaunchContext:
        """Where the launcher's processes run: the pods, which see the job's files at
        ``files_dir``; a parameter-server job's replicas meet at its scheduler's pod."""
        ctx = LaunchContext(
            mf.files_dir(place), cpu=not place.gpu, cache_dir=mf.cache_dir(place), loopback=False
        )
        if not per_replica:
            return ctx
        point = flavor.meeting_point(job_id)
        if point is None:
            raise InvalidSpecError(
                f"--launcher {spec.launcher} runs a pod per replica as plain Kubernetes Jobs, which the "
                f"{flavor.name} flavour's operator does not: use --flavor job"
            )
        return dataclasses.replace(ctx, host=point[0], port=point[1])

    def _initial_replicas(self, spec: JobSpec, request: LaunchRequest) -> list[ReplicaStatus]:
        assert isinstance(request, KubeRequest)
        return flavor_named(request.flavor).replicas(spec)

    def _schedule(self, record: JobRecord) -> None:
        client = self.client()
        assert client is not None
        request = KubeRequest.from_json(record.request)
        created: list[dict[str, Any]] = []
        try:
            for obj in request.manifests:
                created.append(client.create(obj))
            self._link_to_workload(client, created)
        except ApiError as exc:
            for obj in reversed(created):  # leave nothing half-made behind
                self._delete_quietly(
                    client, obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]
                )
            if exc.status == 409:
                raise BackendError(f"{exc}; a job named {record.id!r} already exists in the cluster") from exc
            raise
        record.backend_state.update(
            {"namespace": request.namespace, "flavor": request.flavor, "server": client.host}
        )
        self.store.write_record(record)
        status = self.store.read_status(record.id)
        if status is not None:  # the job's details say which accelerator it got, and why
            line = _device_line(record.spec.nproc_per_node, request)
            status.events.append(Event(now_iso(), "Normal", "Accelerator", line))
            self.store.write_status(status)

    @staticmethod
    def _link_to_workload(client: KubeClient, created: list[dict[str, Any]]) -> None:
        """Make the workload (created last) the owner of the other objects, so the cluster's
        garbage collector removes them with it (its TTL, a ``kubectl delete``)."""
        *others, workload = created
        owner = {"metadata": {"ownerReferences": [mf.owner_reference(workload)]}}
        for obj in others:
            meta = obj["metadata"]
            client.merge_patch(BY_KIND[obj["kind"]], meta["namespace"], meta["name"], owner)

    # -- observe ---------------------------------------------------------------------------
    def _reconcile(self, record: JobRecord, status: JobStatus) -> JobStatus:
        if status.is_terminal or "namespace" not in record.backend_state:
            return status
        client = self.client(required=False)
        if client is None:
            return status  # nothing to ask; show the last known status
        ns, flavor = record.backend_state["namespace"], flavor_named(record.backend_state["flavor"])
        workloads = informer(client, flavor.resource, ns, mf.OUR_SELECTOR)
        pods = pods_informer(client, ns)
        events = informer(client, EVENTS, ns, None, index=_event_subject)
        for inf in (workloads, pods, events):
            inf.wait_synced()
        workload = workloads.get(mf.object_name(record.id))
        if workload is None:
            # Not in the cache: just created (the watch has not caught up) or removed behind our back.
            workload = client.get(flavor.resource, ns, mf.object_name(record.id))
            if workload is None:
                gone = f"the {flavor.resource.kind} {record.id} is gone from namespace {ns}"
                exits = read_exits(self.store.job_dir(record.id))
                recorded = status_from_exits(status, flavor.rank0_replica(record.spec), exits, gone)
                if recorded is not None:  # e.g. removed by its TTL after it ended
                    return self._write_unless_ended(recorded)
                return self._write_unless_ended(status.end(JobPhase.FAILED, "WorkloadDeleted", gone))
        own_pods = pods.indexed(record.id)
        siblings = [sib for name in _sibling_names(record, flavor) if (sib := workloads.get(name))]
        own_events = _events_of(events, record.id, [*own_pods, *siblings])
        new = build_status(status, flavor, record.id, workload, own_pods, own_events, siblings=siblings)
        if new.is_terminal and not pods_settled(own_pods):
            # The pods' watch may lag the workload's: ask for the pods now before deciding.
            selector = f"{mf.JOB_ID_LABEL}={record.id}"
            own_pods = client.list_objects(PODS, ns, selector).get("items", [])
            final = pods_settled(own_pods) or self._settle_over(record.id)
            new = build_status(status, flavor, record.id, workload, own_pods, own_events, final, siblings)
        if new.is_terminal:
            self._ended_at.pop(record.id, None)
            if not flavor.workload_end(conditions_of(workload), workload.get("status") or {}):
                self._remove_running(record)
        timeout = parse_options(record.spec.options).pending_timeout
        if self._pending.overdue(new, workload, timeout):
            self._remove_objects(record)  # pods that wait forever still hold quota and claims
            return self._write_unless_ended(timed_out(new, timeout))
        if _comparable(new) != _comparable(status):
            return self._write_unless_ended(new)
        return new

    def _remove_running(self, record: JobRecord) -> None:
        """The job ended while its workload runs on (a sibling failed: a parameter server's
        scheduler or servers): remove it, or its workers would wait for the sibling forever."""
        try:
            self._remove_objects(record)
        except ApiError as exc:  # the verdict stands; a cancel or delete removes them later
            log.warning("could not remove the workload of ended job %s: %s", record.id, exc)

    def _settle_over(self, job_id: str) -> bool:
        first = self._ended_at.setdefault(job_id, time.monotonic())
        return time.monotonic() - first > SETTLE_SECONDS

    def _write_unless_ended(self, status: JobStatus) -> JobStatus:
        """Store ``status`` unless another process (a cancel in the kernel, say) ended the job
        since we read it: an ended job's record is final."""
        current = self.store.read_status(status.job_id)
        if current is not None and current.is_terminal:
            return current
        try:
            self.store.write_status(status)
        except OSError as exc:  # a full or read-only disk: the cluster's answer still stands
            log.warning("could not record the status of job %s: %s", status.job_id, exc)
        return status

    def _streamed_logs(
        self,
        record: JobRecord,
        replica: str | None,
        *,
        follow: bool,
        tail: int | None,
        offset: str | int | None,
        budget: Budget | None,
    ) -> Iterator[LogLine] | None:
        """The pods' own logs (``pods/log``) when the job dir is not on a shared PVC; else the
        log files there (they outlive the pods)."""
        if self._logs_in_files(record.id):
            return None
        return self.pod_logs(record.id, replica, follow=follow, tail=tail, offset=offset, budget=budget)

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
        client = self.client()
        assert client is not None
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
        client = self.client(required=False)
        if client is None or "namespace" not in state:
            return read_resources(job_dir, [], since, message="the job has no pods to measure")
        selector = f"{mf.JOB_ID_LABEL}={record.id}"
        flavor = flavor_named(state["flavor"])
        return pod_resources(
            client, state["namespace"], selector, record.id, flavor, status.is_terminal, since, time.time()
        )

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
        from .podlogs import newest_per_replica

        client = self.client()
        assert client is not None
        ns, flavor = record.backend_state["namespace"], flavor_named(record.backend_state["flavor"])
        pods = pods_informer(client, ns)
        pods.wait_synced()
        pod = newest_per_replica(pods.indexed(record.id), record.id, flavor).get(replica)
        if pod is None:
            raise BackendError(f"{replica} has no pod now: no process to read")
        text = exec_in_pod(client, ns, pod["metadata"]["name"], ["python3", "-c", POD_STACKS, record.id])
        return StackDump(replica, "py-spy", text, None)

    # -- stop ------------------------------------------------------------------------------
    def _cancel_existing(self, record: JobRecord) -> None:
        self._remove_objects(record)
        status = self.store.read_status(record.id) or JobStatus(job_id=record.id, created=record.created)
        message = "cancelled by the user; the workload and its pods were deleted, files stay"
        status.end(JobPhase.CANCELLED, "Cancelled", message)
        for rep in status.replicas:
            if not rep.phase.is_terminal:
                rep.phase = JobPhase.CANCELLED
        status.events.append(Event(now_iso(), "Normal", "Cancelled", "workload, pods and Service deleted"))
        self.store.write_status(status)

    def _delete_existing(self, record: JobRecord) -> None:
        self._remove_objects(record)

    def _remove_objects(self, record: JobRecord) -> None:
        """Delete the workload (its pods go with it: propagation), then the objects created
        before it (a Service, the ConfigMap)."""
        if "namespace" not in record.backend_state:
            return  # never reached the cluster
        client = self.client()
        assert client is not None
        request = KubeRequest.from_json(record.request)
        if not request.logs_on_pvc:
            self._keep_pod_logs(client, record, request)
        workload, *others = reversed(request.manifests)
        ns = request.namespace
        client.delete(BY_KIND[workload["kind"]], ns, workload["metadata"]["name"], propagation="Foreground")
        for obj in others:
            client.delete(BY_KIND[obj["kind"]], ns, obj["metadata"]["name"])

    def _keep_pod_logs(self, client: KubeClient, record: JobRecord, request: KubeRequest) -> None:
        """Copy the pods' logs into the job dir before the pods go: they are the only copy."""
        flavor = flavor_named(request.flavor)
        try:
            kept = keep_pod_logs(client, request.namespace, record.id, flavor, self.store.logs_dir(record.id))
        except (ApiError, OSError) as exc:  # the cancel itself must still happen
            log.warning("could not keep the pod logs of job %s: %s", record.id, exc)
            return
        if kept and not record.backend_state.get("logs_kept"):
            record.backend_state["logs_kept"] = True  # from now on, logs are read from these files
            self.store.write_record(record)

    @staticmethod
    def _delete_quietly(client: KubeClient, kind: str, namespace: str, name: str) -> None:
        with contextlib.suppress(ApiError):
            client.delete(BY_KIND[kind], namespace, name)


def _events_of(events: Informer, job_id: str, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of the job's workload, ConfigMap and ``objects`` (its pods, sibling workloads)."""
    subjects = [job_id, mf.configmap_name(job_id), *(o["metadata"]["name"] for o in objects)]
    return [e for name in subjects for e in events.indexed(name)]


def _sibling_names(record: JobRecord, flavor: Flavor) -> list[str]:
    """The names of the objects of the workload's kind created besides it (one per role)."""
    manifests = KubeRequest.from_json(record.request).manifests
    return [
        o["metadata"]["name"]
        for o in manifests[:-1]
        if o["kind"] == flavor.resource.kind and o["apiVersion"] == flavor.resource.api_version
    ]


def pods_informer(client: KubeClient, namespace: str) -> Informer:
    """Our pods in ``namespace``, indexed by job id."""
    return informer(client, PODS, namespace, mf.OUR_SELECTOR, index=_job_of)


def _job_of(obj: dict[str, Any]) -> str | None:
    labels: dict[str, str] = obj.get("metadata", {}).get("labels", {})
    return labels.get(mf.JOB_ID_LABEL)


def _event_subject(event: dict[str, Any]) -> str | None:
    name: str | None = event.get("involvedObject", {}).get("name")
    return name


def _namespace(opts: KubeOptions, pod: dict[str, Any] | None, client: KubeClient | None) -> str:
    """``--namespace``, else the notebook pod's, else the kubeconfig context's, else ``default``."""
    return (
        opts.namespace
        or (pod or {}).get("metadata", {}).get("namespace")
        or (client.default_namespace if client else None)
        or "default"
    )


def _inherited_from(pod: dict[str, Any] | None, container: dict[str, Any], found: str) -> str | None:
    """What the job's image, mounts and accelerator came from: the notebook pod, if found."""
    if pod is None:
        return None
    meta = pod["metadata"]
    return f"pod {meta['namespace']}/{meta['name']}, container {container.get('name')} ({found})"


def _colocation(opts: KubeOptions, pod: dict[str, Any] | None, found: str) -> str | None:
    """With ``--colocate``, the notebook pod's node (every pod is to run there)."""
    if not opts.colocate:
        return None
    node: str | None = (pod or {}).get("spec", {}).get("nodeName")
    if not node:
        why = found if pod is None else "it is not bound to a node yet"
        raise InvalidSpecError(f"--colocate needs the notebook pod's node, and there is none: {why}")
    return node


def _pod_volumes(pod_spec: dict[str, Any], container: dict[str, Any]) -> list[Volume]:
    """The notebook container's PVC mounts, at the same paths (zero configuration)."""
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod_spec.get("volumes", []) or []
        if v.get("persistentVolumeClaim")
    }
    out = []
    for m in container.get("volumeMounts", []) or []:
        if m.get("name") in claims:
            out.append(
                Volume(
                    claim=claims[m["name"]],
                    mount_path=m["mountPath"],
                    read_only=bool(m.get("readOnly", False)),
                    sub_path=m.get("subPath") or None,
                )
            )
    return out


def _merge_volumes(inherited: list[Volume], given: list[Volume]) -> list[Volume]:
    """Flags win over the notebook's mounts at the same path; the rest is inherited."""
    paths = {v.mount_path.rstrip("/") for v in given}
    return [v for v in inherited if v.mount_path.rstrip("/") not in paths] + list(given)


def _device_line(nproc_per_node: int, request: KubeRequest) -> str:
    """``accelerator: 4 GPU(s) per pod: <why>`` from a dry run's request."""
    gpu = request.device == "cuda"
    what = f"{nproc_per_node} GPU(s) per pod" if gpu else "CPU processes (gloo), no GPU requested"
    return f"accelerator: {what}: {request.device_reason}"


def _comparable(status: JobStatus) -> dict[str, Any]:
    data = status.to_dict()
    data.pop("updated", None)
    return data


class _Dumper(yaml.SafeDumper):
    """YAML that shows multi-line strings (the pod wrapper) as readable literal blocks."""


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_presenter)


def _sampled_ranks(job_dir: Path, ended: bool) -> list[ReplicaState]:
    """The ranks the pods' samplers wrote series of (the pods' own replicas are not ranks)."""
    return [ReplicaState(name, ended, None) for name in sampled_replicas(job_dir)]
