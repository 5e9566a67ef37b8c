"""Spec → Kubernetes objects: pure functions, no API calls, one pod template for every flavour.

The pieces every flavour shares: a ``JobSpec`` plus a ``Placement`` (what the cluster or the
flags decided: namespace, image, volumes, server version) become plain dicts that ``kubectl
apply`` accepts. Each flavour (``flavors/``) wraps the pod in its own workload object. The same
packaged script runs unchanged under every flavour because every pod gets the same command, the
same ``PET_*``/``DISTTRAIN_*`` environment and the same volumes.
"""

from __future__ import annotations

import base64
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from ...launchers.base import PROCESS, Role
from ...model.errors import InvalidSpecError
from ...model.specs import JobSpec, Volume
from ...runtime import contract
from ..rankenv import rank_env
from . import podruntime
from .options import KubeOptions, parse_quantity
from .podscript import POD_WRAPPER, PYTHON_LAUNCH, SAME_PYTHON, TORCHRUN

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "jupyter-disttrain"
JOB_ID_LABEL = "disttrain.io/job-id"
ROLE_LABEL = "disttrain.io/role"  # the launcher's role a pod runs (a flavour's replica types aside)
# An Indexed Job's pods: their replica group (``node``; a parameter server's ``scheduler``,
# ``server``, ``worker``), and the replica's name when the group has one replica named after it.
GROUP_LABEL = "disttrain.io/replica-group"
REPLICA_LABEL = "disttrain.io/replica"
OUR_SELECTOR = f"{MANAGED_BY}={MANAGER}"
MASTER_PORT = 29500
PS_ROOT_PORT = 9091  # a parameter server's scheduler (DMLC_PS_ROOT_PORT), in its own pod
# Where the script and the job dir live inside the pod when the job dir is not on a shared PVC.
CODE_DIR = "/disttrain/code"
SCRATCH_ROOT = "/disttrain/jobs"
# A ConfigMap is at most 1 MiB including its metadata; keep room for the latter.
CONFIGMAP_LIMIT = 1_000_000
SCRIPT_PLACEHOLDER = "# the packaged script goes here (dry run without a script)\n"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
RANK_PREFIX = "[rank${rank}]:"
# The strictest rule any of our object names meets: Services (and, through the training
# operator's webhook, PyTorchJobs) are DNS-1035 labels, so a job id must start with a letter.
_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
HOSTNAME_MAX = 63


@dataclass(frozen=True)
class Placement:
    """What the cluster (or the flags) decided for one job."""

    namespace: str
    image: str
    flavor: str
    k8s_version: tuple[int, int]
    job_dir: str
    volumes: tuple[Volume, ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    gpu: bool = False
    accelerator_reason: str = ""
    notebook: str | None = None  # the notebook pod and container inherited from, if any
    node: str | None = None  # --colocate: the notebook pod's node, where every pod must run
    # securityContext of the pods and of their container (podsecurity.py decides)
    pod_security: dict[str, Any] = field(default_factory=dict)
    container_security: dict[str, Any] = field(default_factory=dict)
    # cpu and memory "requests"/"limits" taken from the notebook container where no --cpu or
    # --memory says otherwise (a namespace's ResourceQuota may require them)
    resources: dict[str, dict[str, str]] = field(default_factory=dict)
    # What was decided for the user besides the flags, and why: lines of the dry run's header.
    notes: tuple[str, ...] = ()
    # The launcher's role the pods run (its script arguments and env; DeepSpeed's config path,
    # MPLBACKEND...; a parameter server's DMLC_*); None: a plain torchrun worker on the spec's arguments.
    role: Role | None = None
    # Every role of the launcher (a flavour lays out one pod per replica of each process role).
    roles: tuple[Role, ...] = ()

    @property
    def pvc_for_job_dir(self) -> Volume | None:
        """The mounted claim that holds the job dir, if any (then pods see it at the same path)."""
        return next((v for v in self.volumes if under(self.job_dir, v.mount_path)), None)

    @property
    def pod_job_dir(self) -> str:
        return (
            self.job_dir
            if self.pvc_for_job_dir
            else posixpath.join(SCRATCH_ROOT, posixpath.basename(self.job_dir))
        )


def under(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root + "/") or root == "/"


def object_name(job_id: str) -> str:
    return job_id


def configmap_name(job_id: str) -> str:
    return f"{job_id}-code"


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """A reference to the created workload (its uid): the cluster's garbage collector removes
    the other objects of the job with it (a TTL, a delete by hand). Not ``blockOwnerDeletion``,
    which needs permission to set finalizers on the owner."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
    }


def labels(job_id: str) -> dict[str, str]:
    return {MANAGED_BY: MANAGER, JOB_ID_LABEL: job_id}


def _check_names(spec: JobSpec, job_id: str, host: str) -> None:
    if not _DNS1035.fullmatch(job_id):
        raise InvalidSpecError(
            f"--name {spec.name!r}: Kubernetes Service and PyTorchJob names must start with a letter; "
            f"use e.g. --name run-{spec.name}"
        )
    if len(host) > HOSTNAME_MAX:
        raise InvalidSpecError(
            f"job id {job_id!r} is too long: pod hostname {host!r} has {len(host)} characters, over "
            f"{HOSTNAME_MAX}; use a --name shorter by {len(host) - HOSTNAME_MAX}"
        )


def check_fit(spec: JobSpec, job_id: str, opts: KubeOptions, place: Placement, last_host: str) -> None:
    """Refuse what the cluster would refuse later (or run wrongly): names, /dev/shm, mount paths.
    ``last_host`` is the longest hostname of the job's pods (its flavour names them)."""
    _check_names(spec, job_id, last_host)
    memory = memory_limit(spec, place)
    if (
        opts.shm_size
        and memory
        and parse_quantity(opts.shm_size, "--shm-size") > parse_quantity(memory, "--memory")
    ):
        limit = f"--memory {memory}" if spec.memory else f"the notebook container's memory limit {memory}"
        raise InvalidSpecError(
            f"--shm-size {opts.shm_size} is larger than {limit}; /dev/shm counts against the memory "
            "limit, so make it smaller"
        )
    for v in place.volumes:
        if not v.mount_path.startswith("/") or v.mount_path.rstrip("/") in ("/dev/shm", CODE_DIR):
            raise InvalidSpecError(f"--pvc {v.claim}:{v.mount_path}: choose another mount path")


def metadata(job_id: str, namespace: str, name: str | None = None) -> dict[str, Any]:
    return {"name": name or object_name(job_id), "namespace": namespace, "labels": labels(job_id)}


def workload_metadata(
    job_id: str, namespace: str, opts: KubeOptions, name: str | None = None
) -> dict[str, Any]:
    """The workload's metadata: with ``--queue``, Kueue's label (every flavour; Kueue reads only it)."""
    meta = metadata(job_id, namespace, name)
    if opts.queue:
        meta["labels"][KUEUE_QUEUE_LABEL] = opts.queue
    return meta


def configmap(job_id: str, namespace: str, files: dict[str, bytes | str]) -> dict[str, Any]:
    """The script (and side files) for a job whose dir is not on a shared volume."""
    data: dict[str, str] = {}
    binary: dict[str, str] = {}
    for name, content in sorted(files.items()):
        if isinstance(content, str):
            data[name] = content
            continue
        try:
            data[name] = content.decode("utf-8")
        except UnicodeDecodeError:
            binary[name] = base64.b64encode(content).decode("ascii")
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(job_id, namespace, configmap_name(job_id)),
        "data": data,
    }
    if binary:
        obj["binaryData"] = binary
    return obj


def configmap_size(obj: dict[str, Any]) -> int:
    return sum(
        len(k) + len(v.encode()) for part in ("data", "binaryData") for k, v in obj.get(part, {}).items()
    )


def code_configmap(
    spec: JobSpec,
    job_id: str,
    place: Placement,
    payload: dict[str, bytes | str] | None,
    runtime: bool = True,
) -> dict[str, Any]:
    """The ConfigMap that ships ``payload`` (script and side files) when the job dir is not on a
    shared volume, and with ``runtime`` the job's runtime archive (for the pod wrapper); without
    a payload it holds a placeholder (a dry run before packaging)."""
    files = dict(payload or {spec.entrypoint: SCRIPT_PLACEHOLDER})
    if runtime:
        files[podruntime.ARCHIVE] = podruntime.archive()
    cm = configmap(job_id, place.namespace, files)
    size = configmap_size(cm)
    if size > CONFIGMAP_LIMIT:
        raise InvalidSpecError(
            f"the script and side files are {size} bytes, over the {CONFIGMAP_LIMIT}-byte "
            "ConfigMap limit; put the job dir on a shared PVC (run from a mounted volume or pass --pvc)"
        )
    return cm


def files_dir(place: Placement) -> str:
    """Where the pods find the script and side files: the job dir on the PVC, else the ConfigMap's mount."""
    return place.job_dir if place.pvc_for_job_dir else CODE_DIR


def cache_dir(place: Placement) -> str | None:
    """The user's cache that outlives jobs (compiled ops), beside the job dirs on their PVC; None
    when the job dir is not on one (the pod's own filesystem goes with it)."""
    return posixpath.join(posixpath.dirname(place.job_dir), ".cache") if place.pvc_for_job_dir else None


def script_path(spec: JobSpec, place: Placement) -> str:
    """Where the pods find the script."""
    return posixpath.join(files_dir(place), spec.entrypoint)


def script_args(spec: JobSpec, place: Placement) -> list[str]:
    """The script's arguments in the pods: the launcher's role's (DeepSpeed's config path...)."""
    return list(place.role.args) if place.role else list(spec.args)


def program(spec: JobSpec, place: Placement) -> list[str]:
    """What the pods run (under torchrun, or alone for a process role): the role's entry file and
    its arguments (the script's path first), or the script and its arguments."""
    if place.role is not None and place.role.entry:
        return [place.role.entry, *place.role.args]
    return [script_path(spec, place), *script_args(spec, place)]


def container_command(
    spec: JobSpec, job_id: str, place: Placement, replica_prefix: str, rank0: str | None
) -> list[str]:
    """``sh -c FIND_PYTHON jupyter-disttrain -c WRAPPER <log dir> <exit dir> <replica prefix> <job id>
    <rank 0's replica> <the job's runtime> -- torchrun ... script args``: the image's python runs
    the wrapper, which runs torchrun, or for a process role (one process per pod) the script
    itself with its own python. ``replica_prefix`` goes before the pod's hostname minus the job
    id to name its replica; a prefix ``=<name>`` is the replica's whole name. The job's runtime
    is the archive the job ships (``podruntime``), beside the script."""
    log_dir = exit_dir = "-"  # no shared job dir: logs via pods/log, no exit record
    if place.pvc_for_job_dir is not None:
        log_dir = posixpath.join(place.job_dir, contract.LOGS_DIR)
        exit_dir = posixpath.join(place.job_dir, contract.EXITS_DIR)
    if place.role is not None and place.role.via == PROCESS:
        launcher = [SAME_PYTHON, "-u", *program(spec, place)]
    else:
        launcher = [*TORCHRUN, *program(spec, place)]
    runtime = podruntime.archive_path(files_dir(place))
    wrapper_args = [log_dir, exit_dir, replica_prefix, job_id, rank0 or "-", runtime, "--", *launcher]
    return [*PYTHON_LAUNCH, "-c", POD_WRAPPER, *wrapper_args]


def rank_command(spec: JobSpec, place: Placement) -> list[str]:
    """What each rank runs where torchrun is not ours to start (T9k's controller runs it, with
    ``--no-python``): the image's python on ``program``, the job's PYTHONPATH in front of the
    image's, as the pod wrapper's python has it."""
    return [*PYTHON_LAUNCH, *program(spec, place)]


def _env_value(value: str) -> str:
    # The kubelet expands $(VAR) in env values; "$$" keeps a user's "$(" literal.
    return value.replace("$", "$$")


def pod_template(
    spec: JobSpec,
    job_id: str,
    opts: KubeOptions,
    place: Placement,
    extra_env: list[dict[str, Any]],
    *,
    container: str,
    replica_prefix: str,
    rank0: str | None,
) -> dict[str, Any]:
    """The pod every flavour runs: command, env contract, resources, volumes, placement.

    ``container`` names the training container; ``replica_prefix`` is what the pod wrapper puts
    before its hostname (minus the job id) to name its replica, ``rank0`` is the replica of rank 0
    (its pod follows MLflow into TensorBoard). A flavour adds its own fields."""
    working_dir = spec.working_dir
    if not working_dir or not any(under(working_dir, v.mount_path) for v in place.volumes):
        working_dir = place.pod_job_dir if place.pvc_for_job_dir else CODE_DIR
    volumes, mounts = _volumes(spec, job_id, opts, place)
    main: dict[str, Any] = {
        "name": container,
        "image": place.image,
        "command": container_command(spec, job_id, place, replica_prefix, rank0),
        "workingDir": working_dir,
        "env": _env(spec, job_id, place, working_dir, extra_env),
        "resources": _resources(spec, place),
        "volumeMounts": mounts,
        # A container that fails before writing a log file (no python, no torchrun) still shows
        # why: the kubelet puts the end of its output into the status.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if place.container_security:
        main["securityContext"] = dict(place.container_security)
    pod_spec: dict[str, Any] = {"containers": [main], "volumes": volumes, **_pod_fields(opts, place)}
    return {
        "metadata": {
            "labels": {**labels(job_id), ROLE_LABEL: place.role.name if place.role else "worker"},
            "annotations": {"sidecar.istio.io/inject": "false"},
        },
        "spec": pod_spec,
    }


def _env(
    spec: JobSpec, job_id: str, place: Placement, working_dir: str, extra_env: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The flavour's variables first (``PET_*`` of an Indexed Job), then the rank env contract."""
    role_env = place.role.env if place.role else None
    ours = rank_env(
        spec,
        job_id,
        place.pod_job_dir,
        cpu=not place.gpu,
        working_dir=working_dir,
        inherited={},
        role_env=role_env,
    )
    # The image may set PYTHONPATH itself: the pod's entry script puts ours in front of it.
    ours[contract.PYTHONPATH_ENV] = ours.pop("PYTHONPATH")
    ours["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = RANK_PREFIX
    env: list[dict[str, Any]] = list(extra_env)
    taken = {e["name"] for e in env}
    return env + [{"name": k, "value": _env_value(v)} for k, v in ours.items() if k not in taken]


def _volumes(
    spec: JobSpec, job_id: str, opts: KubeOptions, place: Placement
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the container's mounts: the claims, /dev/shm, and without a shared
    job dir the script's ConfigMap and a scratch job dir."""
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    for i, v in enumerate(place.volumes):
        vol_name = f"pvc-{i}"
        volumes.append(
            {"name": vol_name, "persistentVolumeClaim": {"claimName": v.claim, "readOnly": v.read_only}}
        )
        mount: dict[str, Any] = {"name": vol_name, "mountPath": v.mount_path, "readOnly": v.read_only}
        if v.sub_path:
            mount["subPath"] = v.sub_path
        mounts.append(mount)
    shm: dict[str, Any] = {"medium": "Memory"}
    shm_size = opts.shm_size or _default_shm(memory_limit(spec, place))
    if shm_size:
        shm["sizeLimit"] = shm_size
    volumes.append({"name": "dshm", "emptyDir": shm})
    mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    if place.pvc_for_job_dir is None:
        volumes.append({"name": "code", "configMap": {"name": configmap_name(job_id)}})
        mounts.append({"name": "code", "mountPath": CODE_DIR, "readOnly": True})
        volumes.append({"name": "job-dir", "emptyDir": {}})
        mounts.append({"name": "job-dir", "mountPath": place.pod_job_dir})
    return volumes, mounts


def _pod_fields(opts: KubeOptions, place: Placement) -> dict[str, Any]:
    """Who the pods run as and where they may run: the pod spec's fields besides the containers."""
    pod_spec: dict[str, Any] = {}
    if place.pod_security:
        pod_spec["securityContext"] = dict(place.pod_security)
    if opts.service_account:
        pod_spec["serviceAccountName"] = opts.service_account
    if opts.node_selector:
        pod_spec["nodeSelector"] = dict(opts.node_selector)
    tolerations = list(opts.tolerations)
    if place.gpu and not any(t["key"] == "nvidia.com/gpu" for t in tolerations):
        tolerations.append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if opts.priority_class:
        pod_spec["priorityClassName"] = opts.priority_class
    if place.node:  # through the scheduler (nodeName would skip its resource checks)
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [place.node]}]}
        required = {"nodeSelectorTerms": [term]}
        pod_spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    if place.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in place.image_pull_secrets]
    return pod_spec


def memory_limit(spec: JobSpec, place: Placement) -> str | None:
    """The pods' memory limit: ``--memory``, else the notebook container's, if any."""
    return spec.memory or place.resources.get("limits", {}).get("memory")


def _resources(spec: JobSpec, place: Placement) -> dict[str, Any]:
    """``--cpu``/``--memory`` as requests = limits (Guaranteed QoS when both are set), else the
    notebook container's own requests and limits; GPUs are whole-device limits."""
    out: dict[str, dict[str, str]] = {"limits": {}, "requests": {}}
    for name, flag, value in (("cpu", "--cpu", spec.cpu), ("memory", "--memory", spec.memory)):
        if value:
            parse_quantity(value, flag)
            out["limits"][name] = out["requests"][name] = value
            continue
        for part, amounts in out.items():
            inherited = place.resources.get(part, {}).get(name)
            if inherited:
                amounts[name] = inherited
    if place.gpu:
        out["limits"]["nvidia.com/gpu"] = out["requests"]["nvidia.com/gpu"] = str(spec.nproc_per_node)
    return {part: amounts for part, amounts in out.items() if amounts}


def _default_shm(memory: str | None) -> str | None:
    """Half the memory limit (in MiB), so /dev/shm cannot push the pod over it on its own."""
    if not memory:
        return None
    mib = int(parse_quantity(memory, "--memory") / 2**20 / 2)
    return f"{max(mib, 64)}Mi"
