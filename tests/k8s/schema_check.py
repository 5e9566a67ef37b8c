"""Offline checks of emitted objects: real schemas (strict) plus the rules schemas miss."""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

CRD_DIR = Path(__file__).parent / "crds"
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def strictify(node: Any) -> Any:
    """additionalProperties: false wherever properties are listed (the API server would prune)."""
    if isinstance(node, dict):
        open_ended = "additionalProperties" in node or node.get("x-kubernetes-preserve-unknown-fields")
        if "properties" in node and not open_ended:
            node["additionalProperties"] = False
        for v in node.values():
            strictify(v)
    elif isinstance(node, list):
        for v in node:
            strictify(v)
    return node


@functools.cache
def crd_validator(file: str, version: str) -> jsonschema.Draft7Validator:
    crd = yaml.safe_load((CRD_DIR / file).read_text())
    v = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    return jsonschema.Draft7Validator(strictify(copy.deepcopy(v["schema"]["openAPIV3Schema"])))


CRDS = {("kubeflow.org/v1", "PyTorchJob"): ("kubeflow.org_pytorchjobs.yaml", "v1")}


def schema_errors(obj: dict[str, Any], k8s: str) -> list[str]:
    """Errors of one object against its real schema; [] when it is valid."""
    key = (obj["apiVersion"], obj["kind"])
    if key in CRDS:
        return [
            f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in crd_validator(*CRDS[key]).iter_errors(obj)
        ]
    try:
        kubernetes_validate.validate(obj, k8s, strict=True)
        return []
    except kubernetes_validate.ValidationError as e:
        return [f"{'.'.join(map(str, e.path))}: {e.message}"]


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec", {})
    if obj["kind"] == "Job":
        return [spec["template"]["spec"]]
    if obj["kind"] == "PyTorchJob":
        return [r["template"]["spec"] for r in spec["pytorchReplicaSpecs"].values()]
    if obj["kind"] == "PyTorchTrainingJob":
        return [r["template"]["spec"] for r in spec["replicaSpecs"]]
    return []


def semantic_errors(obj: dict[str, Any]) -> list[str]:
    """What the schemas cannot catch: enums, quantities, name lengths, operator webhook rules."""
    errs: list[str] = []
    name = obj["metadata"]["name"]
    if not _DNS1123_LABEL.match(name) or len(name) > 63:
        errs.append(f"name {name!r} is not a DNS-1123 label")
    spec = obj.get("spec", {})
    if obj["kind"] == "Job":
        if spec.get("completionMode") not in (None, "NonIndexed", "Indexed"):
            errs.append("completionMode")
        for i in range(spec.get("completions", 1)):
            if len(f"{name}-{i}") > 63:
                errs.append("pod hostname too long")
        # The headless Service is named after the job (every Job of a parameter-server job shares it).
        if spec["template"]["spec"].get("subdomain") != obj["metadata"]["labels"].get("disttrain.io/job-id"):
            errs.append("subdomain must equal the Service name")
    if obj["kind"] in ("Service", "PyTorchJob") and not _DNS1035_LABEL.match(name):
        errs.append(f"{obj['kind']} names are DNS-1035 labels")
    if obj["kind"] == "PyTorchJob":
        reps = spec["pytorchReplicaSpecs"]
        if set(reps) - {"Master", "Worker"} or reps.get("Master", {}).get("replicas") != 1:
            errs.append("exactly one Master, optional Workers")
        if spec["runPolicy"].get("cleanPodPolicy") not in ("None", "Running", "All"):
            errs.append("cleanPodPolicy")
        for r in reps.values():
            if r.get("restartPolicy") not in ("Always", "OnFailure", "Never", "ExitCode"):
                errs.append("replica restartPolicy")
            names = [c["name"] for c in r["template"]["spec"]["containers"]]
            if "pytorch" not in names:
                errs.append("PyTorchJob needs a container named 'pytorch'")
    if obj["kind"] == "PyTorchTrainingJob":
        for r in spec["replicaSpecs"]:
            if r.get("restartPolicy") not in ("Always", "OnFailure", "Never", "ExitCode"):
                errs.append("replica restartPolicy")
        if spec["runPolicy"].get("cleanUpPolicy") not in ("None", "All", "Unfinished"):
            errs.append("cleanUpPolicy")
    for pod in _pod_specs(obj):
        if pod.get("restartPolicy") not in (None, "Always", "OnFailure", "Never"):
            errs.append("pod restartPolicy")
        for c in pod["containers"]:
            for part in ("limits", "requests"):
                for key, q in c.get("resources", {}).get(part, {}).items():
                    if not isinstance(q, str) or not _QUANTITY.match(q):
                        errs.append(f"{c['name']} {part}.{key}={q!r} is not a quantity string")
            mounts = {m["name"] for m in c.get("volumeMounts", [])}
            vols = {v["name"] for v in pod.get("volumes", [])}
            if mounts - vols:
                errs.append(f"mounts without volumes: {mounts - vols}")
        for v in pod.get("volumes", []):
            size = v.get("emptyDir", {}).get("sizeLimit")
            if size is not None and not _QUANTITY.match(size):
                errs.append(f"sizeLimit {size!r}")
            if v.get("emptyDir", {}).get("medium") not in (None, "", "Memory"):
                errs.append("emptyDir medium")
    return errs
