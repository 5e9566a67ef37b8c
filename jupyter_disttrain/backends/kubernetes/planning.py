"""The dry run: everything a job's objects depend on is decided here, then the manifests are built.

``Planner.placement`` decides the flavour, namespace, image, volumes and server-version gates
(from the flags, the notebook's own pod and the cluster, asked only when needed);
``Planner.dryrun`` lays the launcher's roles out over the flavour's pods and returns the typed
request (``KubeRequest``) and the YAML that ``submit`` creates exactly.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from typing import Any

import yaml

from ...launchers import get_launcher
from ...launchers.base import TORCHRUN, LaunchContext, Role
from ...model.errors import InvalidSpecError
from ...model.specs import DryRun, JobSpec, Volume
from ...monitoring import guard
from ...storage.store import JobStore
from . import manifests as mf
from .claims import check_claims
from .client import ApiError, ClusterAccess, KubeClient
from .flavors import Flavor, discover, flavor_named, process_roles
from .notebook import choose_accelerator, container_resources, find_own_pod, notebook_container
from .options import FLAVORS, KubeOptions, parse_quantity
from .podsecurity import pod_security
from .pools import start_line
from .request import KubeRequest

# Gates for Job fields when no cluster can be asked (dry run with explicit flags); see docs.
DEFAULT_K8S_VERSION = (1, 29)
_CLAIM = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def check_spec(spec: JobSpec) -> None:
    """Refuse what no cluster would take: quantities, claim names, mount paths (the options are
    checked as the backend resolves them)."""
    for flag, value in (("--cpu", spec.cpu), ("--memory", spec.memory)):
        if value is not None:
            parse_quantity(value, flag)
    for v in spec.volumes:
        if not _CLAIM.fullmatch(v.claim):
            raise InvalidSpecError(f"--pvc {v.claim}:{v.mount_path}: {v.claim!r} is not a claim name")
        if not v.mount_path.startswith("/") or ".." in v.mount_path.split("/"):
            raise InvalidSpecError(f"--pvc {v.claim}:{v.mount_path}: the mount path must be absolute")


class Planner:
    """Decides where and how a job runs and builds its objects; creates nothing."""

    def __init__(self, cluster: ClusterAccess, store: JobStore, backend: str) -> None:
        self.cluster = cluster
        self.store = store
        self.backend = backend  # the name a dry run reports

    def notebook_pod(self) -> tuple[dict[str, Any] | None, str]:
        """This kernel's own pod, read from the API, and how it was found (or why it was not)."""
        client = self.cluster.optional()
        if client is None:
            return None, "no Kubernetes cluster is configured to read it from"
        return find_own_pod(client, os.environ)

    def default_namespace(self) -> str | None:
        """Where jobs run when no --namespace says (the pools listed); None without a cluster."""
        client = self.cluster.optional()
        return None if client is None else namespace_for(KubeOptions(), self.notebook_pod()[0], client)

    def placement(
        self,
        spec: JobSpec,
        job_id: str,
        opts: KubeOptions,
        default_flavor: str | None = None,
        roles: Sequence[Role] = (),
    ) -> mf.Placement:
        """Decide namespace, image, volumes, flavour and version gates; ask the cluster only when
        needed. ``default_flavor``: the flavour without ``--flavor``, else the one discovered;
        ``roles``: the launcher's process roles, a pod per replica (else a pod per node)."""
        client = self.cluster.optional()
        if client is None and opts.flavor is None and default_flavor is None:
            # What is missing is in the request (a dry run needs no cluster with it), not a
            # cluster that failed to answer: one line that says what to pass (a 400 over REST).
            raise InvalidSpecError(
                f"no flavor: pass --flavor ({', '.join(FLAVORS)}); the default is discovered from the "
                "cluster, and no Kubernetes cluster is configured (run in a pod with a service account "
                "or set KUBECONFIG)"
            )
        pod, found = self.notebook_pod()
        pod_spec = (pod or {}).get("spec", {})
        container = notebook_container(pod, spec.working_dir, os.environ) if pod else {}
        image = spec.image or container.get("image")
        if not image:
            raise InvalidSpecError(
                "no image: pass --image (the default is the notebook pod's image, but that pod was not "
                f"found: {found})"
            )
        namespace = namespace_for(opts, pod, client)
        volumes = _merge_volumes(_pod_volumes(pod_spec, container), spec.volumes)
        if client is not None:
            _check_claims(client, spec, namespace, volumes, opts, roles)
        node = _colocation(opts, pod, found)
        flavor = opts.flavor or default_flavor or self.discover_flavor()
        version = opts.k8s_version or (_server_version(client) if client else None) or DEFAULT_K8S_VERSION
        secrets = tuple(s["name"] for s in pod_spec.get("imagePullSecrets", []) or [] if s.get("name"))
        gpu, why = choose_accelerator(spec.accelerator, container if pod else None)
        job_dir = str(self.store.job_dir(job_id))
        return mf.Placement(
            namespace=namespace,
            image=image,
            flavor=flavor,
            k8s_version=version,
            job_dir=job_dir,
            volumes=tuple(volumes),
            image_pull_secrets=secrets,
            gpu=gpu,
            accelerator_reason=why,
            notebook=_inherited_from(pod, container, found),
            node=node,
            **_from_notebook(spec, opts, pod, container, job_dir, volumes),
        )

    def discover_flavor(self) -> str:
        """``pytorchjob`` if the Kubeflow operator's API is served, else ``t9k`` if T9k's, else ``job``."""
        client = self.cluster.required()
        groups = client.api_groups()
        return discover(lambda res: client.has_resource(res, groups)).name

    def dryrun(self, spec: JobSpec, job_id: str, payload: dict[str, bytes], opts: KubeOptions) -> DryRun:
        """The exact request ``submit`` carries out, and its YAML with a header saying what was
        decided and why."""
        # A pod per replica of a parameter-server job: plain Jobs, which every cluster runs.
        process = process_roles(spec)
        per_replica = bool(process)
        if per_replica and opts.queue:
            raise InvalidSpecError(
                f"--queue {opts.queue}: --launcher {spec.launcher} runs one Job per role, which Kueue would "
                "admit one by one (workers could hold quota while the scheduler waits); leave out --queue"
            )
        place = self.placement(spec, job_id, opts, "job" if per_replica else None, process)
        _check_resume(spec, place)
        flavor = flavor_named(place.flavor)
        _check_out(spec, place, flavor)
        ctx = _launch_context(spec, job_id, place, flavor, per_replica)
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
            job_dir_on_pvc=place.pvc_for_job_dir is not None,
            guard=guard.resolve(opts, os.environ).to_json(),
        )
        start = start_line(self.cluster.optional(), spec, request, opts)
        header = (
            f"# jupyter-disttrain job {job_id}: flavor {place.flavor}, namespace {place.namespace}, "
            f"Job fields gated for Kubernetes {place.k8s_version[0]}.{place.k8s_version[1]}\n"
            f"# {device_line(spec.nproc_per_node, request)}\n# start: {start}\n"
        )
        if place.notebook:
            header += f"# inherited from the notebook: {place.notebook}\n"
        header += "".join(f"# {note}\n" for note in place.notes)
        if place.pvc_for_job_dir is None:
            header += (
                "# the job dir is not on a mounted PVC: the script ships in a ConfigMap, logs via pods/log\n"
                f"# {SCRATCH_CHECKPOINTS}\n"
            )
        text = header + yaml.dump_all(request.manifests, Dumper=_Dumper, sort_keys=False, width=110)
        return DryRun(job_id=job_id, job_dir=place.job_dir, backend=self.backend, request=request, text=text)


# Said in the dry run and as an event of a job whose dir is not on a PVC.
SCRATCH_CHECKPOINTS = (
    "checkpoints live only as long as the pods: their job dir is scratch of their own, so a replaced "
    "pod or a later --resume cannot find them; put the job dir on a PVC (--pvc) to keep them"
)


def _check_resume(spec: JobSpec, place: mf.Placement) -> None:
    """A ``--resume`` checkpoint must be where the pods see it: under a claim they mount, at the
    same path (the notebook's own files are not in the pods)."""
    resumed = spec.resumed_from
    if resumed is None or any(mf.under(resumed.path, v.mount_path) for v in place.volumes):
        return
    raise InvalidSpecError(
        f"--resume {spec.resume}: checkpoint {resumed.path} is on no PVC the pods mount, so they "
        "cannot read it; mount the claim that holds it at the same path (--pvc CLAIM:PATH, PATH a "
        "directory above it)"
    )


def _check_out(spec: JobSpec, place: mf.Placement, flavor: Flavor) -> None:
    """``--out``: the ranks write the values into the job dir, so the kernel reads them only
    from a job dir the pods share (on a PVC), written by our rank wrapper."""
    if not (spec.out or spec.out_all):
        return
    if place.pvc_for_job_dir is None:
        raise InvalidSpecError(
            f"--out: the values come back through the job dir ({place.job_dir}), which is on no PVC the "
            "pods mount; run the notebook from a mounted PVC or mount the one holding it (--pvc CLAIM:PATH)"
        )
    if not flavor.runs_wrapper:
        raise InvalidSpecError(
            f"--out: the {flavor.name} flavour runs torchrun without jupyter_disttrain's rank wrapper, which "
            "writes the values; use --flavor job or pytorchjob"
        )


def _launch_context(
    spec: JobSpec, job_id: str, place: mf.Placement, flavor: Flavor, per_replica: bool
) -> LaunchContext:
    """Where the launcher's processes run: the pods, which see the job's files at
    ``files_dir``; a parameter-server job's replicas meet at its scheduler's pod."""
    ctx = LaunchContext(mf.files_dir(place), cpu=not place.gpu, cache_dir=mf.cache_dir(place), loopback=False)
    if not per_replica:
        return ctx
    point = flavor.meeting_point(job_id)
    if point is None:
        raise InvalidSpecError(
            f"--launcher {spec.launcher} runs a pod per replica as plain Kubernetes Jobs, which the "
            f"{flavor.name} flavour's operator does not: use --flavor job"
        )
    return dataclasses.replace(ctx, host=point[0], port=point[1])


def _check_claims(
    client: KubeClient,
    spec: JobSpec,
    namespace: str,
    volumes: list[Volume],
    opts: KubeOptions,
    roles: Sequence[Role],
) -> None:
    """Refuse single-node claims for the job's pods: one per node, or one per replica of its
    process roles (an MXNet job's scheduler, servers and workers, whatever ``--nodes`` says)."""
    if not roles:
        why, one_pod = f"--nodes {spec.nodes}", "--nodes 1"
        check_claims(client, namespace, volumes, spec.nodes, opts.colocate, why=why, one_pod=one_pod)
        return
    pods = sum(r.replicas for r in roles)
    what = ", ".join(f"{r.replicas} {r.name}" for r in roles)
    why = f"--launcher {spec.launcher} runs {pods} pods ({what})"
    check_claims(client, namespace, volumes, pods, opts.colocate, why=why)


def _server_version(client: KubeClient) -> tuple[int, int] | None:
    try:
        return client.server_version()
    except ApiError:
        return None


def device_line(nproc_per_node: int, request: KubeRequest) -> str:
    """``accelerator: 4 GPU(s) per pod: <why>`` from a dry run's request."""
    gpu = request.device == "cuda"
    what = f"{nproc_per_node} GPU(s) per pod" if gpu else "CPU processes (gloo), no GPU requested"
    return f"accelerator: {what}: {request.device_reason}"


def namespace_for(opts: KubeOptions, pod: dict[str, Any] | None, client: KubeClient | None) -> str:
    """``--namespace``, else the notebook pod's, else the kubeconfig context's, else ``default``."""
    return (
        opts.namespace
        or (pod or {}).get("metadata", {}).get("namespace")
        or (client.default_namespace if client else None)
        or "default"
    )


def _from_notebook(
    spec: JobSpec,
    opts: KubeOptions,
    pod: dict[str, Any] | None,
    container: dict[str, Any],
    job_dir: str,
    volumes: list[Volume],
) -> dict[str, Any]:
    """Who the pods run as and the cpu and memory they ask for (``Placement`` fields), and the
    dry run's notes on both: from the notebook pod where there is one (``podsecurity``)."""
    claim = next((v for v in volumes if mf.under(job_dir, v.mount_path)), None)
    if opts.group_access and claim is None:
        raise InvalidSpecError(
            f"--group-access lets the group read the job dir on a shared PVC, and {job_dir} is on no "
            "PVC the pods mount: leave it out, or put the job root on a PVC (--pvc CLAIM:PATH)"
        )
    security = pod_security(pod, container, run_as_root=opts.run_as_root, job_dir_claim=claim)
    resources = container_resources(container) if pod else {}
    return {
        "pod_security": security.pod,
        "container_security": security.container,
        "resources": resources,
        "notes": tuple(n for n in (security.note, _resources_note(spec, resources)) if n),
    }


def _resources_note(spec: JobSpec, inherited: dict[str, dict[str, str]]) -> str | None:
    """What the pods take of the notebook container's cpu and memory (no --cpu/--memory said)."""
    taken = {
        part: ",".join(f"{k}={v}" for k, v in amounts.items() if getattr(spec, k) is None)
        for part, amounts in inherited.items()
    }
    said = "; ".join(f"{part} {text}" for part, text in taken.items() if text)
    return f"resources from the notebook container: {said} (--cpu/--memory to change)" if said else None


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


class _Dumper(yaml.SafeDumper):
    """YAML that shows multi-line strings (the pod wrapper) as readable literal blocks."""


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_presenter)
