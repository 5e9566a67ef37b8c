"""Kubernetes warm pools from the notebook's side (docs/warm-start.md "Kubernetes pools"): the
kept pods of a namespace, found by their label (so a restarted kernel finds them again), each
asked through ``pods/exec`` of its relay (``poolpod.py ask``): the API server is the only way in.
A re-run of the same shape forks in one (no new Pod); one of another shape is told why not."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
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
# What a forked job takes from its pool pod, not from its own manifest: where node 0's agent
# hosts the rendezvous (the pool's node 0, through the pool's headless Service; the job's own
# names a Service that a forked job never creates).
POOL_OWN = ("PET_MASTER_ADDR", "PET_MASTER_PORT")
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
    mine = [p for p in pods if p["metadata"]["labels"].get(poolshape.POOL_LABEL) == pool]
    for group in complete_groups(mine, spec.nodes):
        names = ", ".join(p["metadata"]["name"] for p in group)
        return f"warm: pool {pool} ({'pods' if len(group) > 1 else 'pod'} {names})"
    if mine:
        return f"cold: {_incomplete(pool, mine, spec.nodes)}{kept}"
    for pod in pods:
        differs = poolshape.first_difference(_shape_of(pod), job)
        if differs:
            return f"cold: pool {pod['metadata']['labels'][poolshape.POOL_LABEL]} has {differs}{kept}"
    return f"cold: no pool of this shape{kept}"


def _incomplete(pool: str, running: list[dict[str, Any]], nodes: int) -> str:
    """Why a pool of the job's shape cannot take it: not every node has a running pod."""
    return f"pool {pool} has {len(running)} of its {nodes} pods running"


def node_index(pod: dict[str, Any]) -> int:
    """A kept pod's node (its completion index: the node rank it gives its jobs)."""
    return flavor_named("job").replica_of("", pod)[2]


def by_pool(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Kept pods by pool (the first job's id, whose Job keeps them), each pool's in node order."""
    found: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        found.setdefault(pod["metadata"]["labels"][mf.JOB_ID_LABEL], []).append(pod)
    return {pool: sorted(members, key=node_index) for pool, members in found.items()}


def complete_groups(pods: list[dict[str, Any]], nodes: int) -> list[list[dict[str, Any]]]:
    """The pools among ``pods`` (all of one shape) whose every node has a running pod."""
    return [g for g in by_pool(pods).values() if [node_index(p) for p in g] == list(range(nodes))]


@dataclass(frozen=True)
class Forked:
    """A job forked in a pool: the pool's key, its pods in node order, node 0's replica name."""

    pool: str
    pods: list[str]
    replica: str


def fork(client: KubeClient, job_id: str, spec: JobSpec, request: KubeRequest) -> tuple[Forked | None, str]:
    """Fork the job in every pod of a pool of its shape, or in none: (where it runs, ""), or
    (None, why not: the Started event's line; empty for a job that neither keeps pods nor found
    a pool)."""
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
    for group in complete_groups(pods, spec.nodes):
        replica, why = _fork_in_every_pod(client, group, spawn_request(job_id, request))
        if replica:
            return Forked(pool, [p["metadata"]["name"] for p in group], replica), ""
        refused.append(why)
    if refused:
        return None, f"cold: pool {pool}: " + "; ".join(refused)
    if pods:
        return None, f"cold: {_incomplete(pool, pods, spec.nodes)}"
    return None, said and f"cold: no pool {pool} runs"


def _fork_in_every_pod(
    client: KubeClient, group: list[dict[str, Any]], request: dict[str, Any]
) -> tuple[str, str]:
    """Fork the job in each pod, node 0 first (two jobs after one pool meet there, so the loser
    is refused before it forked anywhere): node 0's replica, or ("", why not) once the forks
    already made are withdrawn (never half a job)."""
    made: list[dict[str, Any]] = []
    replica = ""
    for pod in group:
        answer = ask(client, pod, request)
        if not answer.get("ok"):
            for done in made:  # stopped, their log and exit record removed: the job runs cold
                ask(client, done, {"op": "withdraw", "job": request["job"]})
            return "", f"pod {pod['metadata']['name']}: {answer.get('error')}"
        made.append(pod)
        replica = replica or str(answer["replica"])
    return replica, ""


def spawn_request(job_id: str, request: KubeRequest) -> dict[str, Any]:
    """What the pool server needs to run the job's own pod wrapper: its arguments, and the
    container's variables as the kubelet would set them (``$$`` and ``$(VAR)`` expanded; those
    the pod sets itself, from ``fieldRef``, and ``POOL_OWN``, named in ``from_pod``)."""
    ctr = request.manifests[-1]["spec"]["template"]["spec"]["containers"][0]
    env: dict[str, str] = {}
    for item in ctr["env"]:
        if "value" in item:
            env[item["name"]] = _REF.sub(
                lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), item["value"]
            )
    for name in POOL_OWN:
        env.pop(name, None)
    from_pod = [item["name"] for item in ctr["env"] if "value" not in item or item["name"] in POOL_OWN]
    return {
        "op": "spawn",
        "job": job_id,
        "args": ctr["command"][len(PYTHON_LAUNCH) + 2 :],  # after "-c WRAPPER": the wrapper's own
        "env": env,
        "from_pod": from_pod,
    }


def signal_job(client: KubeClient, namespace: str, pod_names: list[str], job_id: str, sig: int) -> None:
    """Signal a forked job's wrapper in each of its pool pods (cancel: SIGTERM, passed on to its
    agent)."""
    for name in pod_names:
        pod = client.get(PODS, namespace, name)
        if pod is not None:
            ask(client, pod, {"op": "signal", "job": job_id, "signal": sig})


def pools(client: KubeClient, namespace: str) -> list[Pool]:
    """A pool per kept Job of ``namespace`` (its name is the pool's id), a node per pod, each pod
    asked its jobs and idle time; one whose server does not answer yet (its job's wrapper is
    turning into it) holds its capacity all the same: listed, with no idle time."""
    found = []
    for pool_id, members in by_pool(pool_pods(client, namespace)).items():
        nodes, idles, left = [], [], []
        for pod in members:
            answer = ask(client, pod, {"op": "status"})
            limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
            gpus = [str(i) for i in range(int(limits.get("nvidia.com/gpu", 0)))]
            jobs = list(answer.get("jobs") or [])
            host, name = pod["spec"].get("nodeName") or "", pod["metadata"]["name"]
            nodes.append(PoolNode(node_index(pod), host, name, gpus, jobs))
            idle = answer.get("idle_for")
            idles.append(idle)
            if idle is not None:  # each pod ends itself on its own clock: the first to end ends the pool
                left.append(max(0.0, float(answer.get("keep") or 0) - idle))
        idle_for = None if None in idles else min(i for i in idles if i is not None)
        key = members[0]["metadata"]["labels"][poolshape.POOL_LABEL]
        found.append(
            Pool(
                id=pool_id,
                backend="kubernetes",
                place=f"namespace {namespace}, pool {key}",
                fingerprint=key,
                nodes=nodes,
                accelerators=sum(len(n.accelerators) for n in nodes),
                jobs=sorted({j for n in nodes for j in n.jobs}),
                idle_for=idle_for,
                releases_in=None if idle_for is None else min(left),
                namespace=namespace,
            )
        )
    return found


def release(client: KubeClient, pool: Pool, namespace: str, force: bool) -> ReleaseAnswer:
    """Delete the pool's Job (its pods go with it); a busy pool only when forced (its jobs fail,
    naming a pod)."""
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
    left = [n.step for n in pool.nodes]
    while left and time.monotonic() < deadline:
        left = [pod for pod in left if client.get(PODS, namespace, pod) is not None]
        if left:
            time.sleep(0.2)
    said = "its Job and pods deleted" if not left else f"its Job deleted, pod {', '.join(left)} still ending"
    return ReleaseAnswer(pool.id, not left, f"pool {pool.id}: {said}")
