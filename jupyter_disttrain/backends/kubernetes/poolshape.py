"""A Kubernetes warm pool's shape, decided once: what a job's pods must share with a pool's for
the job to fork in them (docs/warm-start.md "Kubernetes pools"). A kept pod carries its shape
(an annotation) and the shape's key (a label, ``disttrain.pool``): a re-run of the same key
forks there; one of another shape is told the first field that differs and runs cold."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..warm.plan import import_time_env
from . import manifests as mf
from .podscript import POOL_ENV_NAMES_ENV as ENV_NAMES_ENV
from .podscript import POOL_KEEP_ENV as KEEP_ENV
from .request import KubeRequest

POOL_LABEL = "disttrain.pool"  # the pool's key, on each kept pod: found by label after a restart
SHAPE_ANNOTATION = "disttrain.pool/shape"
# In the order the dry run names the first that differs.
FIELDS = (
    "image",
    "namespace",
    "nodes",
    "resources",
    "accelerator",
    "volumes",
    "service_account",
    "placement",
    "import_env",
)


def why_not_kept(request: KubeRequest, nodes: int) -> str | None:
    """Why this job's pods cannot be kept as a pool (None: they can)."""
    if request.flavor != "job":
        return (
            f"pools are kept Indexed Jobs (--flavor job): a {request.flavor}'s pods are its operator's, "
            "which sets their rendezvous, restarts them and ends the job, none of it steered by a pool"
        )
    jobs = [m for m in request.manifests if m.get("kind") == "Job"]
    if len(jobs) != 1 or jobs[0].get("spec", {}).get("completions") != nodes:
        return "pools hold torchrun jobs (one pod per node), not a job of process roles"
    if not request.logs_on_pvc:
        return "the job dir is not on a shared PVC, where a forked job's logs and exit must go"
    return None


def shape(request: KubeRequest, nodes: int, nproc: int) -> dict[str, Any]:
    """The shape of the pods this request makes: what a pool of them can run."""
    pod = request.manifests[-1]["spec"]["template"]["spec"] if request.manifests else {}
    ctr = (pod.get("containers") or [{}])[0]
    env = {e["name"]: e["value"] for e in ctr.get("env", []) if "value" in e}
    return {
        "image": ctr.get("image"),
        "namespace": request.namespace,
        "nodes": f"{nodes}x{nproc}",
        "resources": ctr.get("resources") or {},
        "accelerator": request.device,
        "volumes": [v for v in pod.get("volumes", []) if v.get("name") != "dshm"],
        "service_account": pod.get("serviceAccountName"),
        "placement": {
            k: pod.get(k) for k in ("nodeSelector", "tolerations", "priorityClassName", "affinity")
        },
        "import_env": import_time_env(env),
    }


def key(of: dict[str, Any]) -> str:
    """The pool key: a label value, the same for equal shapes."""
    text = json.dumps([of.get(f) for f in FIELDS], sort_keys=True)
    return "p-" + hashlib.sha256(text.encode()).hexdigest()[:12]


def first_difference(pool: dict[str, Any], job: dict[str, Any]) -> str | None:
    """The dry run's one line for a pool this job does not fit (None: it fits)."""
    for name in FIELDS:
        if pool.get(name) != job.get(name):
            return f"{name.replace('_', ' ')} {_short(pool.get(name))}, this job {_short(job.get(name))}"
    return None


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def keep(request: KubeRequest, nodes: int, nproc: int, seconds: float) -> str:
    """Mark the request's pods to be kept as a pool for ``seconds`` idle; its key."""
    of = shape(request, nodes, nproc)
    pool = key(of)
    pod = request.manifests[-1]["spec"]["template"]
    pod["metadata"]["labels"][POOL_LABEL] = pool
    pod["metadata"].setdefault("annotations", {})[SHAPE_ANNOTATION] = json.dumps(of, sort_keys=True)
    ctr = pod["spec"]["containers"][0]
    names = ",".join(e["name"] for e in ctr["env"])
    ctr["env"] += [
        {"name": KEEP_ENV, "value": str(int(seconds))},
        {"name": ENV_NAMES_ENV, "value": f"{names},{KEEP_ENV},{ENV_NAMES_ENV}"},
    ]
    return pool


def pool_selector(key: str | None = None) -> str:
    """The label selector of the kept pods (of pool ``key`` only, if given)."""
    return f"{mf.OUR_SELECTOR},{POOL_LABEL}" + (f"={key}" if key else "")
