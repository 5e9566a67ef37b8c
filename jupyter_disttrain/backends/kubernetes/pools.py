"""Kubernetes warm pools from the notebook's side (docs/warm-start.md "Kubernetes pools"): the
kept pods of a namespace, found by their label (so a restarted kernel finds them again), each
asked through ``pods/exec`` of its relay (``poolpod.py ask``): the API server is the only way in.
A re-run of the same shape forks in one (no new Pod); one of another shape is told why not."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from ...model.errors import BackendError, PoolBusyError
from ...model.specs import JobSpec
from ...payloads.pools import Pool, PoolNode, ReleaseAnswer
from . import manifests as mf
from . import poolshape
from .client import JOBS, PODS, ApiError, KubeClient
from .flavors import flavor_named
from .options import KubeOptions, parse_options
from .podexec import exec_in_pod
from .podscript import POOL_RELAY, PYTHON_LAUNCH
from .request import KubeRequest

RELEASE_WAIT = 30.0  # seconds a release waits for the pod to go (its jobs get the wrapper's SIGTERM)
_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def pool_pods(client: KubeClient, namespace: str, key: str | None = None) -> list[dict[str, Any]]:
    """The namespace's kept pods that run (a deleted or ended one holds no pool), of pool ``key``
    only if given; BackendError when they cannot be listed."""
    try:
        items = client.list_objects(PODS, namespace, poolshape.pool_selector(key)).get("items", [])
    except ApiError as exc:
        raise BackendError(f"the warm pools of namespace {namespace} cannot be listed: {exc}") from None
    return [
        p
        for p in items
        if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def ask(client: KubeClient, pod: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """One request to a pool pod's server through its relay; its answer (``ok`` false: refused)."""
    meta = pod["metadata"]
    argv = [*PYTHON_LAUNCH, "-c", POOL_RELAY, json.dumps(request)]
    try:
        text = exec_in_pod(client, meta["namespace"], meta["name"], flavor_named("job").container, argv)
    except BackendError as exc:  # a relay that refuses exits 1 with its answer on stdout
        return {"ok": False, "error": str(exc)}
    lines = text.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else {}
    except ValueError:
        return {"ok": False, "error": f"pod {meta['name']}'s relay said {lines[-1][:200]!r}"}
    return answer if isinstance(answer, dict) else {"ok": False, "error": "not an answer"}


def _shape_of(pod: dict[str, Any]) -> dict[str, Any]:
    try:
        found = json.loads(pod["metadata"].get("annotations", {}).get(poolshape.SHAPE_ANNOTATION, "{}"))
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _runs_cold(spec: JobSpec, request: KubeRequest, opts: KubeOptions) -> str | None:
    if opts.cold:
        return "--cold"
    return poolshape.why_not_kept(request, spec.nodes) or ("--max-restarts" if spec.max_restarts else None)


def start_line(client: KubeClient | None, spec: JobSpec, request: KubeRequest, opts: KubeOptions) -> str:
    """The dry run's ``# start:`` line, marking the request's pods kept when ``--keep-warm`` says
    so: in which pool it forks, or the first field in which the namespace's pools differ from it."""
    keep = opts.keep_warm
    if keep and not poolshape.why_not_kept(request, spec.nodes):  # (a --cold job starts a new pool)
        poolshape.keep(request, spec.nodes, spec.nproc_per_node, keep)
    why = _runs_cold(spec, request, opts)
    if why:
        return f"cold: {why}" if keep or opts.cold else "cold"
    job = poolshape.shape(request, spec.nodes, spec.nproc_per_node)
    pool = poolshape.key(job)
    kept = f" (its pods are kept as pool {pool} for {keep:.0f} s when idle)" if keep else ""
    try:
        pods = pool_pods(client, request.namespace) if client is not None else []
    except BackendError as exc:
        return f"cold: {exc}"
    for pod in pods:
        if pod["metadata"]["labels"].get(poolshape.POOL_LABEL) == pool:
            return f"warm: pool {pool} (pod {pod['metadata']['name']})"
    for pod in pods:
        differs = poolshape.first_difference(_shape_of(pod), job)
        if differs:
            return f"cold: pool {pod['metadata']['labels'][poolshape.POOL_LABEL]} has {differs}{kept}"
    return f"cold: no pool of this shape{kept}"


def fork(
    client: KubeClient, job_id: str, spec: JobSpec, request: KubeRequest
) -> tuple[dict[str, Any] | None, str]:
    """Fork the job in a pool pod of its shape: (the pod's answer, its name), or (None, why not:
    the Started event's line; empty for a job that neither keeps pods nor found a pool)."""
    opts = parse_options(spec.options)
    said = "" if not (opts.keep_warm or opts.cold) else "cold"
    why = _runs_cold(spec, request, opts)
    if why:
        return None, said and f"cold: {why}"
    pool = poolshape.key(poolshape.shape(request, spec.nodes, spec.nproc_per_node))
    try:
        pods = pool_pods(client, request.namespace, pool)
    except BackendError as exc:
        return None, said and f"cold: {exc}"
    refused = []
    for pod in pods:
        answer = ask(client, pod, spawn_request(job_id, request))
        if answer.get("ok"):
            return {**answer, "pool": pool}, pod["metadata"]["name"]
        refused.append(f"pod {pod['metadata']['name']}: {answer.get('error')}")
    if refused:
        return None, f"cold: pool {pool}: " + "; ".join(refused)
    return None, said and f"cold: no pool {pool} runs"


def spawn_request(job_id: str, request: KubeRequest) -> dict[str, Any]:
    """What the pool server needs to run the job's own pod wrapper: its arguments, and the
    container's variables as the kubelet would set them (``$$`` and ``$(VAR)`` expanded; those
    the pod sets itself, from ``fieldRef``, named in ``from_pod``)."""
    ctr = request.manifests[-1]["spec"]["template"]["spec"]["containers"][0]
    env: dict[str, str] = {}
    for item in ctr["env"]:
        if "value" in item:
            env[item["name"]] = _REF.sub(
                lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), item["value"]
            )
    return {
        "op": "spawn",
        "job": job_id,
        "args": ctr["command"][len(PYTHON_LAUNCH) + 2 :],  # after "-c WRAPPER": the wrapper's own
        "env": env,
        "from_pod": [item["name"] for item in ctr["env"] if "value" not in item],
    }


def signal_job(client: KubeClient, namespace: str, pod_name: str, job_id: str, sig: int) -> None:
    """Signal a forked job's wrapper in its pool pod (cancel: SIGTERM, passed on to its agent)."""
    pod = client.get(PODS, namespace, pod_name)
    if pod is not None:
        ask(client, pod, {"op": "signal", "job": job_id, "signal": sig})


def pools(client: KubeClient, namespace: str) -> list[Pool]:
    """A pool per kept pod of ``namespace`` (its Job's name is the pool's id); one whose server
    does not answer yet (its job's wrapper is turning into it) holds its capacity all the same:
    listed, with no idle time."""
    found = []
    for pod in pool_pods(client, namespace):
        answer = ask(client, pod, {"op": "status"})
        meta = pod["metadata"]
        limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
        gpus = int(limits.get("nvidia.com/gpu", 0))
        jobs = list(answer.get("jobs") or [])
        idle = answer.get("idle_for")
        node = PoolNode(
            0, pod["spec"].get("nodeName") or "", meta["name"], [str(i) for i in range(gpus)], jobs
        )
        found.append(
            Pool(
                id=meta["labels"][mf.JOB_ID_LABEL],
                backend="kubernetes",
                place=f"namespace {namespace}, pool {meta['labels'][poolshape.POOL_LABEL]}",
                fingerprint=meta["labels"][poolshape.POOL_LABEL],
                nodes=[node],
                accelerators=gpus,
                jobs=jobs,
                idle_for=idle,
                releases_in=None if idle is None else max(0.0, float(answer.get("keep") or 0) - idle),
            )
        )
    return found


def release(client: KubeClient, pool: Pool, namespace: str, force: bool) -> ReleaseAnswer:
    """Delete the pool's Job (its pods go with it); a busy pool only when forced (its jobs fail,
    naming the pod)."""
    if pool.jobs and not force:
        raise PoolBusyError(
            f"pool {pool.id} runs job {', '.join(pool.jobs)}; cancel it first, or release with force "
            "(the job then fails)"
        )
    try:
        client.delete(JOBS, namespace, pool.id, propagation="Foreground")
    except ApiError as exc:
        raise BackendError(f"cannot release pool {pool.id}: {exc}") from None
    deadline = time.monotonic() + RELEASE_WAIT
    pod = pool.nodes[0].step
    while (gone := client.get(PODS, namespace, pod) is None) is False and time.monotonic() < deadline:
        time.sleep(0.2)
    said = "its Job and pod deleted" if gone else f"its Job deleted, pod {pod} still ending"
    return ReleaseAnswer(pool.id, gone, f"pool {pool.id}: {said}")
