"""A fake Kubernetes API server that keeps the real protocol, for the real ``kubernetes`` client.

Stdlib only. What it serves, as the API server does:

* discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>/<version>``;
* namespaced create (409 on a taken name), get, list and delete of pods, services, configmaps,
  events, batch Jobs and (when installed) PyTorchJobs / T9k jobs, with uid, resourceVersion and
  creationTimestamp; JSON merge patch; ``Foreground`` deletes dependents (by ownerReferences)
  first, ``Orphan`` unlinks them, ``Background`` leaves them to the toy cluster's garbage collector;
* list/watch with ``resourceVersion`` (watch from it; ``410 Gone`` as an ERROR event once the
  history before it is compacted), ``labelSelector`` (=, ==, !=, exists, !, in, notin),
  ``fieldSelector`` (dotted paths, = and !=), ``timeoutSeconds`` and bookmarks;
* ``metrics.k8s.io/v1beta1`` PodMetrics lists (``labelSelector``), as metrics-server serves
  them, when ``pod_metrics`` is set (the toy kubelet's: usage of each pod's processes); else 404;
* ``pods/exec`` over a websocket (``v4.channel.k8s.io``: stdout, stderr, then the exit status on
  the error channel) when ``pod_exec`` is set (the toy kubelet runs the command with the pod's env);
* ``pods/log`` with ``container``, ``follow``, ``tailLines``, ``sinceSeconds``, ``timestamps``
  (``pods/log`` and ``pods/exec`` of a pod with several containers need ``container``: 400);
* admission refusals (``admission`` hooks: ``restricted_pod_security`` checks a namespace's pods
  against the "restricted" profile as the real admission controller does; ``quota_requires``, a
  ResourceQuota whose resources every container must set; ``priority_classes`` and
  ``service_accounts``, the Priority and ServiceAccount plugins' lookups),
  RBAC denials (403 with the API server's message; each request authorised as the verb its HTTP
  method means, an exec websocket as get, and from 1.35 also as create), dropped watches and lagging watches
  (``watch_delay``; lists stay current), for failure tests;
* name validation with the API server's 422 answers: every name a DNS-1123 subdomain, Services
  (and, through the training operator's webhook, PyTorchJobs) DNS-1035 labels, a pod's hostname
  and subdomain DNS-1123 labels, label values at most 63 characters.

It counts every request, so tests and the bench can say how many calls a refresh costs.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str

    @property
    def key(self) -> str:
        return f"{self.group}/{self.version}/{self.plural}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


CORE = [
    ResourceType("", "v1", "pods", "Pod"),
    ResourceType("", "v1", "services", "Service"),
    ResourceType("", "v1", "configmaps", "ConfigMap"),
    ResourceType("", "v1", "events", "Event"),
    ResourceType("", "v1", "endpoints", "Endpoints"),
    ResourceType("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
]
BATCH_JOBS = ResourceType("batch", "v1", "jobs", "Job")
PYTORCHJOBS = ResourceType("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
T9KJOBS = ResourceType("batch.tensorstack.dev", "v1beta1", "pytorchtrainingjobs", "PyTorchTrainingJob")
OPTIONAL = {"pytorchjob": PYTORCHJOBS, "t9k": T9KJOBS}


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ApiStatus(Exception):
    """An error answer: becomes a ``Status`` object with this code."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def body(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


# -- validation (the API server's rules and wording) ------------------------------------------------
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_ALNUM_END = "and end with an alphanumeric character"
_RULES = {
    "subdomain": (
        _DNS1123_SUBDOMAIN,
        253,
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
        f"'.', and must start {_ALNUM_END}",
    ),
    "label": (
        _DNS1123_LABEL,
        63,
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
        f"and must start {_ALNUM_END}",
    ),
    "dns1035": (
        _DNS1035_LABEL,
        63,
        "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
        f"start with an alphabetic character, {_ALNUM_END}",
    ),
    "label value": (_LABEL_VALUE, 63, "a valid label must be an empty string or consist of alphanumerics"),
}
# Kinds whose names are DNS-1035 labels: Services (the API server) and PyTorchJobs (the
# training operator's validating webhook).
_DNS1035_KINDS = ("Service", "PyTorchJob")


def _invalid(kind: str, name: str, path: str, value: str, rule: str) -> str | None:
    pattern, limit, what = _RULES[rule]
    if len(value) > limit:
        why = f"must be no more than {limit} characters"
    elif not pattern.match(value):
        why = what
    else:
        return None
    return f'{kind} "{name}" is invalid: {path}: Invalid value: "{value}": {why}'


def validate(kind: str, obj: dict[str, Any]) -> None:
    """Raise 422 Invalid for what the API server (or an admission webhook) would refuse."""
    meta = obj.get("metadata", {})
    name = meta.get("name", "")
    spec = obj.get("spec") or {}
    checks = [("metadata.name", name, "dns1035" if kind in _DNS1035_KINDS else "subdomain")]
    checks += [(f"metadata.labels: {k}", str(v), "label value") for k, v in meta.get("labels", {}).items()]
    if kind == "Pod":
        checks += [(f"spec.{k}", spec[k], "label") for k in ("hostname", "subdomain") if k in spec]
    for path, value, rule in checks:
        message = _invalid(kind, name, path, value, rule)
        if message:
            raise ApiStatus(422, "Invalid", message)


# -- PodSecurity admission ----------------------------------------------------------------------
# Volume types the "restricted" profile allows (Pod Security Standards).
_RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
_SECCOMP_OK = ("RuntimeDefault", "Localhost")


def _restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What the PodSecurity admission controller's "restricted" profile finds wrong with a pod,
    in its words (a container's own securityContext overrides the pod's)."""
    spec = pod.get("spec") or {}
    psc = spec.get("securityContext") or {}
    found: list[str] = []
    containers = [*spec.get("initContainers", []), *spec.get("containers", [])]
    for ctr in containers:
        csc, name = ctr.get("securityContext") or {}, ctr.get("name")
        if csc.get("privileged"):
            found.append(f'privileged (container "{name}" must not set securityContext.privileged=true)')
        if csc.get("allowPrivilegeEscalation") is not False:
            found.append(
                f'allowPrivilegeEscalation != false (container "{name}" must set '
                "securityContext.allowPrivilegeEscalation=false)"
            )
        caps = csc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(
                f'unrestricted capabilities (container "{name}" must set '
                'securityContext.capabilities.drop=["ALL"])'
            )
        if csc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
            found.append(
                f'runAsNonRoot != true (pod or container "{name}" must set securityContext.runAsNonRoot=true)'
            )
        if csc.get("runAsUser", psc.get("runAsUser")) == 0:
            found.append(f'runAsUser=0 (container "{name}" must not set runAsUser=0)')
        seccomp = (csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in _SECCOMP_OK:
            found.append(
                f'seccompProfile (pod or container "{name}" must set securityContext.seccompProfile.type '
                'to "RuntimeDefault" or "Localhost")'
            )
    bad = [v["name"] for v in spec.get("volumes", []) if not set(v) - {"name"} <= _RESTRICTED_VOLUMES]
    if bad:
        found.append(f"restricted volume types (volumes {', '.join(bad)} use a type not allowed)")
    return found


def restricted_pod_security(namespace: str) -> Callable[[str, dict[str, Any]], None]:
    """An admission hook for ``FakeCluster.admission``: ``namespace`` is labelled
    ``pod-security.kubernetes.io/enforce: restricted``, so pods that break the profile are refused
    (403, as the API server answers the Job controller)."""

    def admit(kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata", {})
        if kind != "Pod" or meta.get("namespace") != namespace:
            return
        found = _restricted_violations(obj)
        if found:
            raise ApiStatus(
                403,
                "Forbidden",
                f'pods "{meta.get("name")}" is forbidden: violates PodSecurity "restricted:latest": '
                + ", ".join(found),
            )

    return admit


def _refuse_pod(obj: dict[str, Any], why: str) -> None:
    """The 403 an admission plugin answers for a pod, in the API server's words."""
    raise ApiStatus(403, "Forbidden", f'pods "{obj.get("metadata", {}).get("name")}" is forbidden: {why}')


def quota_requires(
    namespace: str, quota: str, resources: tuple[str, ...]
) -> Callable[[str, dict[str, Any]], None]:
    """The ResourceQuota admission plugin for a quota ``quota`` in ``namespace`` whose ``hard``
    names ``resources`` (``limits.cpu``, ``requests.memory``...): a pod whose containers do not
    all set them is refused, whatever room the quota has left."""

    def admit(kind: str, obj: dict[str, Any]) -> None:
        if kind != "Pod" or obj.get("metadata", {}).get("namespace") != namespace:
            return
        missing = set()
        for ctr in obj.get("spec", {}).get("containers", []):
            given = ctr.get("resources") or {}
            for res in resources:
                part, _, name = res.partition(".")
                # A limit alone also sets the request (the API server defaults it first).
                if name not in (given.get(part) or {}) and not (
                    part == "requests" and name in (given.get("limits") or {})
                ):
                    missing.add(res)
        if missing:
            _refuse_pod(obj, f"failed quota: {quota}: must specify {','.join(sorted(missing))}")

    return admit


def priority_classes(*known: str) -> Callable[[str, dict[str, Any]], None]:
    """The Priority admission plugin: a pod naming a PriorityClass that does not exist is refused."""

    def admit(kind: str, obj: dict[str, Any]) -> None:
        name = obj.get("spec", {}).get("priorityClassName") if kind == "Pod" else None
        if name and name not in known:
            _refuse_pod(obj, f"no PriorityClass with name {name} was found")

    return admit


def service_accounts(namespace: str, *known: str) -> Callable[[str, dict[str, Any]], None]:
    """The ServiceAccount admission plugin: a pod's service account (``default`` unless named)
    must exist in its namespace."""

    def admit(kind: str, obj: dict[str, Any]) -> None:
        if kind != "Pod" or obj.get("metadata", {}).get("namespace") != namespace:
            return
        name = obj.get("spec", {}).get("serviceAccountName") or "default"
        if name not in known:
            why = f'error looking up service account {namespace}/{name}: serviceaccount "{name}" not found'
            _refuse_pod(obj, why)

    return admit


# -- selectors ---------------------------------------------------------------------------------
_SET_EXPR = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_selector(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def label_matcher(text: str | None) -> Callable[[dict[str, str]], bool]:
    """A Kubernetes label selector as a predicate over a labels dict."""
    if not text:
        return lambda labels: True
    tests: list[Callable[[dict[str, str]], bool]] = []
    for part in _split_selector(text):
        m = _SET_EXPR.match(part)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if op == "in":
                tests.append(lambda lb, k=key, vs=values: lb.get(k) in vs)
            else:
                tests.append(lambda lb, k=key, vs=values: lb.get(k) not in vs)
        elif "!=" in part:
            key, value = (x.strip() for x in part.split("!=", 1))
            tests.append(lambda lb, k=key, v=value: lb.get(k) != v)
        elif "=" in part:
            key, value = (x.strip() for x in re.split(r"==?", part, maxsplit=1))
            tests.append(lambda lb, k=key, v=value: lb.get(k) == v)
        elif part.startswith("!"):
            absent = part[1:].strip()
            tests.append(lambda lb, k=absent: k not in lb)
        else:
            tests.append(lambda lb, k=part: k in lb)
    return lambda labels: all(t(labels) for t in tests)


def field_matcher(text: str | None) -> Callable[[dict[str, Any]], bool]:
    """A field selector (``involvedObject.name=x,status.phase!=Running``) as a predicate."""
    if not text:
        return lambda obj: True
    tests = []
    for part in _split_selector(text):
        neg = "!=" in part
        path, value = re.split(r"!=|==?", part, maxsplit=1)
        tests.append((path.strip().split("."), value.strip(), neg))

    def match(obj: dict[str, Any]) -> bool:
        for path, value, neg in tests:
            cur: Any = obj
            for p in path:
                cur = cur.get(p) if isinstance(cur, dict) else None
            if (str(cur if cur is not None else "") == value) == neg:
                return False
        return True

    return match


def go_duration(seconds: float) -> str:
    """A duration as Go's ``time.Duration.String`` prints it (what metav1.Duration serialises):
    ``1m0s``, ``10.5s``, ``1h2m3.5s``, ``500ms``."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms" if seconds else "0s"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    out = f"{int(hours)}h" if hours else ""
    out += f"{int(minutes)}m" if hours or minutes else ""
    return out + f"{round(secs, 9):g}s"


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


# -- the store -----------------------------------------------------------------------------------
@dataclass
class PodLog:
    lines: list[tuple[float, bytes]] = field(default_factory=list)
    closed: bool = False


class FakeCluster:
    """Objects, history and logs of a fake cluster; thread-safe."""

    def __init__(self, version: tuple[int, int] = (1, 33), install: tuple[str, ...] = ()) -> None:
        self.version = version
        self.types = {t.key: t for t in [*CORE, BATCH_JOBS, *(OPTIONAL[i] for i in install)]}
        self.cond = threading.Condition(threading.RLock())
        self.rv = 100
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.history: list[tuple[int, str, str, dict[str, Any]]] = []
        self.oldest_rv = 0
        self.watch_epoch = 0
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.denied: set[tuple[str, ...]] = set()  # (verb, resource), or (verb, resource, namespace)
        # When set, only these (apiGroup, resource, verb) are allowed, as an RBAC Role would.
        self.grants: set[tuple[str, str, str]] | None = None
        self.refusals: list[tuple[str, str, str]] = []
        self.service_account = "system:serviceaccount:team-a:default-editor"
        self.logs: dict[tuple[str, str], PodLog] = {}
        self.on_delete: list[Callable[[str, dict[str, Any]], None]] = []
        # Admission: each may refuse a create with an ApiStatus (a ResourceQuota, PodSecurity...).
        self.admission: list[Callable[[str, dict[str, Any]], None]] = []
        # Resource key -> seconds every watch of it holds its events back (a lagging watch cache).
        self.watch_delay: dict[str, float] = {}
        # metrics-server: (namespace, pod) -> {container: {"cpu": "..n", "memory": "..Ki"}}, or
        # None before its first scrape; the metrics API is not served while this is None.
        self.pod_metrics: Callable[[str, str], dict[str, dict[str, str]] | None] | None = None
        # metrics-server's resolution (a pod's reading is renewed once this old) and the window
        # its readings report, in seconds.
        self.metrics_resolution = 5.0
        self.metrics_window = 10.0
        self._scrapes: dict[tuple[str, str], tuple[float, str, dict[str, dict[str, str]]]] = {}
        # The kubelet's exec: (namespace, pod, argv) -> (exit code, stdout, stderr), None: not running.
        self.pod_exec: Callable[[str, str, list[str]], tuple[int, bytes, bytes] | None] | None = None

    def type_of(self, kind: str) -> ResourceType:
        return next(t for t in self.types.values() if t.kind == kind)

    # -- writes -----------------------------------------------------------------------------------
    def _record(self, key: str, kind: str, obj: dict[str, Any]) -> None:
        self.history.append((self.rv, key, kind, copy.deepcopy(obj)))
        self.cond.notify_all()

    def create(self, key: str, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
        t = self.types[key]
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        name = meta.get("name")
        if not name:
            raise ApiStatus(422, "Invalid", f"{t.kind} is invalid: metadata.name: Required value")
        validate(t.kind, obj)
        for admit in self.admission:
            admit(t.kind, obj)
        if meta.get("namespace", ns) != ns:
            raise ApiStatus(
                400, "BadRequest", "the namespace of the object does not match the namespace of the URL"
            )
        with self.cond:
            if (key, ns, name) in self.objects:
                raise ApiStatus(
                    409,
                    "AlreadyExists",
                    f'{t.plural}{"." + t.group if t.group else ""} "{name}" already exists',
                )
            self.rv += 1
            meta.update(
                namespace=ns,
                uid=str(uuid.uuid4()),
                resourceVersion=str(self.rv),
                creationTimestamp=now(),
                generation=1,
            )
            obj.setdefault("apiVersion", t.api_version)
            obj.setdefault("kind", t.kind)
            self.objects[(key, ns, name)] = obj
            self._record(key, "ADDED", obj)
            return copy.deepcopy(obj)

    def update(
        self, key: str, ns: str, name: str, mutate: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any] | None:
        with self.cond:
            obj = self.objects.get((key, ns, name))
            if obj is None:
                return None
            new = copy.deepcopy(obj)
            mutate(new)
            if new == obj:
                return obj
            self.rv += 1
            new["metadata"]["resourceVersion"] = str(self.rv)
            self.objects[(key, ns, name)] = new
            self._record(key, "MODIFIED", new)
            return new

    def delete(self, key: str, ns: str, name: str, propagation: str = "Background") -> dict[str, Any]:
        with self.cond:
            obj = self.objects.pop((key, ns, name), None)
            if obj is None:
                t = self.types[key]
                raise ApiStatus(
                    404, "NotFound", f'{t.plural}{"." + t.group if t.group else ""} "{name}" not found'
                )
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            obj["metadata"]["deletionTimestamp"] = now()
            self._record(key, "DELETED", obj)
            if propagation == "Foreground":  # dependents now; Background leaves them to the GC
                for k2, ns2, n2 in self.dependents(ns, obj["metadata"]["uid"]):
                    self.delete(k2, ns2, n2, propagation)
            elif propagation == "Orphan":
                self.orphan(ns, obj["metadata"]["uid"])
        for hook in self.on_delete:
            hook(key, obj)
        return obj

    def dependents(self, ns: str, uid: str) -> list[tuple[str, str, str]]:
        with self.cond:
            return [
                at
                for at, dep in self.objects.items()
                if at[1] == ns
                and any(r.get("uid") == uid for r in dep["metadata"].get("ownerReferences", []))
            ]

    def orphan(self, ns: str, uid: str) -> None:
        """Drop the owner ``uid`` from its dependents' ownerReferences (propagation Orphan)."""

        def drop(obj: dict[str, Any]) -> None:
            refs = [r for r in obj["metadata"].get("ownerReferences", []) if r.get("uid") != uid]
            obj["metadata"]["ownerReferences"] = refs

        for key, ns2, name in self.dependents(ns, uid):
            self.update(key, ns2, name, drop)

    def patch(self, key: str, ns: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """An RFC 7386 JSON merge patch (what ``application/merge-patch+json`` asks for)."""
        found = self.update(key, ns, name, lambda obj: _merge(obj, patch))
        if found is None:
            t = self.types[key]
            raise ApiStatus(
                404, "NotFound", f'{t.plural}{"." + t.group if t.group else ""} "{name}" not found'
            )
        return copy.deepcopy(found)

    def get(self, key: str, ns: str, name: str) -> dict[str, Any] | None:
        with self.cond:
            obj = self.objects.get((key, ns, name))
            return copy.deepcopy(obj) if obj else None

    def items(self, key: str, ns: str | None = None) -> list[dict[str, Any]]:
        with self.cond:
            return [copy.deepcopy(o) for (k, n, _), o in self.objects.items() if k == key and ns in (None, n)]

    def record_event(self, involved: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = involved["metadata"]
        ev = {
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"]},
            "involvedObject": {
                "kind": involved.get("kind"),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
                "apiVersion": involved.get("apiVersion"),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "count": 1,
            "firstTimestamp": now(),
            "lastTimestamp": now(),
            "source": {"component": "fake-cluster"},
        }
        self.create("/v1/events", meta["namespace"], ev)

    def scrape(self, ns: str, pod: str) -> tuple[str, dict[str, dict[str, str]]] | None:
        """metrics-server's latest reading of a pod: (its time, usage per container), renewed
        once ``metrics_resolution`` seconds old; None while the pod has none."""
        assert self.pod_metrics is not None
        last = self._scrapes.get((ns, pod))
        if last is not None and time.monotonic() - last[0] < self.metrics_resolution:
            return last[1], last[2]
        usage = self.pod_metrics(ns, pod)
        if usage is None:
            return None
        self._scrapes[(ns, pod)] = (time.monotonic(), now(), usage)
        return now(), usage

    # -- failure injection --------------------------------------------------------------------------
    def compact(self) -> None:
        """Forget the history: watches from an older resourceVersion now get 410 Gone."""
        with self.cond:
            self.rv += 1
            self.oldest_rv = self.rv
            self.history.clear()
            self.cond.notify_all()

    def drop_watches(self) -> None:
        """End every open watch stream, as a load balancer or an API server restart would."""
        with self.cond:
            self.watch_epoch += 1
            self.cond.notify_all()

    # -- logs -------------------------------------------------------------------------------------
    def append_log(self, ns: str, pod: str, line: bytes) -> None:
        with self.cond:
            self.logs.setdefault((ns, pod), PodLog()).lines.append((time.time(), line))
            self.cond.notify_all()

    def close_log(self, ns: str, pod: str) -> None:
        with self.cond:
            self.logs.setdefault((ns, pod), PodLog()).closed = True
            self.cond.notify_all()

    def open_log(self, ns: str, pod: str) -> None:
        with self.cond:
            self.logs.setdefault((ns, pod), PodLog()).closed = False
            self.cond.notify_all()

    # -- authorisation ------------------------------------------------------------------------------
    def authorize(
        self, group: str, plural: str, sub: str | None, verb: str, ns: str, name: str | None
    ) -> None:
        """Allow the request or answer 403 as RBAC does (``denied``, else ``grants`` if set)."""
        resource = plural + (f"/{sub}" if sub else "")
        refused = self.grants is not None and (group, resource, verb) not in self.grants
        if not {(verb, resource), (verb, resource, ns)} & self.denied and not refused:
            return
        self.refusals.append((group, resource, verb))
        # The API server's words: the object (its group-qualified resource and its name), then who
        # may not do what to which resource or subresource.
        what = f"{plural}{'.' + group if group else ''}" + (f' "{name}"' if name else "")
        raise ApiStatus(
            403,
            "Forbidden",
            f'{what} is forbidden: User "{self.service_account}" cannot {verb} '
            f'resource "{resource}" in API group "{group}" in the namespace "{ns}"',
        )

    # -- request bookkeeping --------------------------------------------------------------------------
    def grant_role(self, role: dict[str, Any]) -> None:
        """Allow exactly what an RBAC Role's rules allow (everything else: 403)."""
        self.grants = {
            (g, r, v)
            for rule in role["rules"]
            for g in rule.get("apiGroups", [])
            for r in rule.get("resources", [])
            for v in rule.get("verbs", [])
        }

    def count(self, method: str | None = None, path_contains: str = "") -> int:
        with self.cond:
            return sum(1 for m, p, _ in self.requests if method in (None, m) and path_contains in p)


# -- HTTP ----------------------------------------------------------------------------------------
_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455's
_STREAMED = ("exec", "attach", "portforward")  # pod subresources a websocket upgrade reaches


def _ws_frame(opcode: int, payload: bytes) -> bytes:
    """One unmasked, final websocket frame (a server's)."""
    n = len(payload)
    if n < 126:
        head = bytes([0x80 | opcode, n])
    elif n < 1 << 16:
        head = bytes([0x80 | opcode, 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 127]) + n.to_bytes(8, "big")
    return head + payload


_METRICS_PATH = re.compile(r"^/apis/metrics\.k8s\.io/v1beta1/namespaces/(?P<ns>[^/]+)/pods/?$")
_NS_PATH = re.compile(
    r"^/(?:api/(?P<cv>v1)|apis/(?P<g>[^/]+)/(?P<v>[^/]+))/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    cluster: FakeCluster

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # -- plumbing ---------------------------------------------------------------------------------
    def _json(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n)) if n else None

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        c = self.cluster
        with c.cond:
            c.requests.append((method, url.path, query))
        try:
            body = self._body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
            self._route(method, url.path, query, body)
        except ApiStatus as st:
            self._json(st.code, st.body())
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    # -- routes -----------------------------------------------------------------------------------
    def _route(self, method: str, path: str, query: dict[str, str], body: Any) -> None:
        c = self.cluster
        if path == "/version":
            major, minor = c.version
            return self._json(
                200, {"major": str(major), "minor": str(minor), "gitVersion": f"v{major}.{minor}.0"}
            )
        if path == "/api":
            return self._json(200, {"kind": "APIVersions", "versions": ["v1"]})
        if path == "/apis":
            groups: dict[str, list[str]] = {}
            for t in c.types.values():
                if t.group:
                    groups.setdefault(t.group, []).append(t.version)
            return self._json(
                200,
                {
                    "kind": "APIGroupList",
                    "apiVersion": "v1",
                    "groups": [
                        {
                            "name": g,
                            "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in sorted(set(vs))],
                            "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
                        }
                        for g, vs in sorted(groups.items())
                    ],
                },
            )
        m = re.match(r"^/(?:api/(v1)|apis/([^/]+)/([^/]+))/?$", path)
        if m:
            group, version = (m.group(2) or ""), (m.group(1) or m.group(3))
            found = [t for t in c.types.values() if t.group == group and t.version == version]
            if not found:
                raise ApiStatus(404, "NotFound", "the server could not find the requested resource")
            return self._json(
                200,
                {
                    "kind": "APIResourceList",
                    "groupVersion": found[0].api_version,
                    "resources": [
                        {
                            "name": t.plural,
                            "kind": t.kind,
                            "namespaced": True,
                            "verbs": ["create", "delete", "get", "list", "patch", "watch"],
                        }
                        for t in found
                    ],
                },
            )
        m = _METRICS_PATH.match(path)
        if m and c.pod_metrics is not None and method == "GET":
            c.authorize("metrics.k8s.io", "pods", None, "list", m.group("ns"), None)
            return self._pod_metrics(m.group("ns"), query)
        m = _NS_PATH.match(path)
        if not m:
            raise ApiStatus(404, "NotFound", "the server could not find the requested resource")
        group, version = (m.group("g") or ""), (m.group("cv") or m.group("v"))
        key = f"{group}/{version}/{m.group('plural')}"
        if key not in c.types:
            raise ApiStatus(404, "NotFound", "the server could not find the requested resource")
        ns, name, sub = m.group("ns"), m.group("name"), m.group("sub")
        t = c.types[key]
        for verb in self._verbs(method, name, sub, query):
            c.authorize(group, t.plural, sub, verb, ns, name)
        if sub == "log" and t.plural == "pods" and method == "GET":
            return self._pod_log(ns, name or "", query)
        if sub == "exec" and t.plural == "pods" and c.pod_exec is not None:
            return self._pod_exec(ns, name or "", query)
        if sub:
            raise ApiStatus(404, "NotFound", "the server could not find the requested resource")
        if method == "POST" and not name:
            return self._json(201, c.create(key, ns, body or {}))
        if method == "PATCH" and name:
            if self.headers.get("Content-Type", "").split(";")[0] != "application/merge-patch+json":
                raise ApiStatus(415, "UnsupportedMediaType", "only merge patches are served here")
            return self._json(200, c.patch(key, ns, name, body or {}))
        if method == "DELETE" and name:
            policy = (body or {}).get("propagationPolicy") or query.get("propagationPolicy") or "Background"
            c.delete(key, ns, name, policy)
            return self._json(
                200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": name}}
            )
        if method == "GET" and name:
            obj = c.get(key, ns, name)
            if obj is None:
                raise ApiStatus(
                    404, "NotFound", f'{t.plural}{"." + group if group else ""} "{name}" not found'
                )
            return self._json(200, obj)
        if method == "GET" and query.get("watch") in ("true", "1"):
            return self._watch(key, ns, query)
        if method == "GET":
            labels, fields = (
                label_matcher(query.get("labelSelector")),
                field_matcher(query.get("fieldSelector")),
            )
            with c.cond:
                items = [
                    copy.deepcopy(o)
                    for (k, n, _), o in sorted(c.objects.items())
                    if k == key and n == ns and labels(o["metadata"].get("labels", {})) and fields(o)
                ]
                rv = str(c.rv)
            return self._json(
                200,
                {
                    "kind": f"{t.kind}List",
                    "apiVersion": t.api_version,
                    "metadata": {"resourceVersion": rv},
                    "items": items,
                },
            )
        raise ApiStatus(405, "MethodNotAllowed", f"{method} is not supported here")

    def _verbs(self, method: str, name: str | None, sub: str | None, query: dict[str, str]) -> list[str]:
        """The verbs a request is authorised as, in order. The verb comes from the HTTP method
        (the API server's request info: GET is get, list or watch; POST create; PUT update;
        PATCH patch; DELETE delete or deletecollection), so an exec websocket, an upgraded GET,
        is a get on pods/exec; from 1.35 (AuthorizePodWebsocketUpgradeCreatePermission, beta
        and on) such an upgrade of exec, attach or portforward is checked as create too."""
        if method in ("GET", "HEAD"):
            verb = "watch" if query.get("watch") in ("true", "1") else "get" if name else "list"
        else:
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, "")
            verb = verb or ("delete" if name else "deletecollection")
        upgrade = self.headers.get("Upgrade", "").lower() == "websocket"
        if upgrade and sub in _STREAMED and verb == "get" and self.cluster.version >= (1, 35):
            return [verb, "create"]
        return [verb]

    def _pod(self, ns: str, name: str) -> dict[str, Any]:
        pod = self.cluster.get("/v1/pods", ns, name)
        if pod is None:
            raise ApiStatus(404, "NotFound", f'pods "{name}" not found')
        return pod

    @staticmethod
    def _container(pod: dict[str, Any], given: str | None) -> str:
        """The container a ``pods/log`` or ``pods/exec`` request is for, as the API server picks
        it (pkg/registry/core/pod/strategy.go): the one named, else the pod's only one; a pod with
        more (an injected sidecar) needs the name."""
        name = pod["metadata"]["name"]
        names = [x["name"] for x in pod["spec"]["containers"]]
        inits = [x["name"] for x in pod["spec"].get("initContainers", [])]
        if not given:
            if len(names) == 1:
                return names[0]
            message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
            if inits:
                message += f" or one of the init containers: [{' '.join(inits)}]"
            raise ApiStatus(400, "BadRequest", message)
        if given not in names + inits:
            raise ApiStatus(400, "BadRequest", f"container {given} is not valid for pod {name}")
        return given

    def _pod_exec(self, ns: str, name: str, query: dict[str, str]) -> None:
        """``pods/exec`` as the API server proxies it: a websocket upgrade, then one binary
        message per output chunk (first byte: 1 stdout, 2 stderr, 3 the final Status)."""
        assert self.cluster.pod_exec is not None
        if self.headers.get("Upgrade", "").lower() != "websocket":
            raise ApiStatus(400, "BadRequest", "Upgrade request required")
        self._container(self._pod(ns, name), query.get("container"))
        argv = parse_qs(urlsplit(self.path).query).get("command", [])
        result = self.cluster.pod_exec(ns, name, argv)
        if result is None:
            raise ApiStatus(400, "BadRequest", f"container of pod {name} is not running")
        protocols = [p.strip() for p in self.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        if "v4.channel.k8s.io" not in protocols:
            raise ApiStatus(400, "BadRequest", "this server speaks v4.channel.k8s.io only")
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + _WS_GUID).encode()).digest()).decode()
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
        self.end_headers()
        code, out, err = result
        if code == 0:
            status: dict[str, Any] = {"metadata": {}, "status": "Success"}
        else:
            cause = {"reason": "ExitCode", "message": str(code)}
            status = {
                "metadata": {},
                "status": "Failure",
                "message": f"command terminated with non-zero exit code: exit status {code}",
                "reason": "NonZeroExitCode",
                "details": {"causes": [cause]},
            }
        for channel, data in ((1, out), (2, err), (3, json.dumps(status).encode())):
            if data:
                self.wfile.write(_ws_frame(0x2, bytes([channel]) + data))
        self.wfile.write(_ws_frame(0x8, b"\x03\xe8"))  # close: normal
        self.wfile.flush()
        self.close_connection = True

    def _pod_metrics(self, ns: str, query: dict[str, str]) -> None:
        """``PodMetricsList``: one reading per pod that has one, as metrics-server answers: the
        pod's labels (not its annotations), its last scrape's time and usage (a new scrape once
        ``metrics_resolution`` has passed), and the ``window`` as Go prints a duration (``1m0s``)."""
        c, labels = self.cluster, label_matcher(query.get("labelSelector"))
        items = []
        for pod in c.items("/v1/pods", ns):
            meta = pod["metadata"]
            scraped = c.scrape(ns, meta["name"]) if labels(meta.get("labels", {})) else None
            if scraped is None:
                continue
            stamp, usage = scraped
            items.append(
                {
                    "kind": "PodMetrics",
                    "apiVersion": "metrics.k8s.io/v1beta1",
                    "metadata": {
                        "name": meta["name"],
                        "namespace": ns,
                        "labels": meta.get("labels", {}),
                        "creationTimestamp": now(),
                    },
                    "timestamp": stamp,
                    "window": go_duration(c.metrics_window),
                    "containers": [{"name": n, "usage": u} for n, u in usage.items()],
                }
            )
        body = {
            "kind": "PodMetricsList",
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {},
            "items": items,
        }
        return self._json(200, body)

    def _watch(self, key: str, ns: str, query: dict[str, str]) -> None:
        c = self.cluster
        labels, fields = label_matcher(query.get("labelSelector")), field_matcher(query.get("fieldSelector"))
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        bookmarks = query.get("allowWatchBookmarks") == "true"
        start = query.get("resourceVersion")

        def wanted(k: str, obj: dict[str, Any]) -> bool:
            meta = obj["metadata"]
            return k == key and meta.get("namespace") == ns and labels(meta.get("labels", {})) and fields(obj)

        self._start_stream("application/json")
        with c.cond:
            epoch = c.watch_epoch
            if start in (None, "", "0"):
                initial = [
                    ("ADDED", copy.deepcopy(o)) for (k, _, _), o in sorted(c.objects.items()) if wanted(k, o)
                ]
                cursor = c.rv
            elif int(start) < c.oldest_rv:
                gone = ApiStatus(410, "Expired", f"too old resource version: {start} ({c.oldest_rv})").body()
                initial, cursor = [("ERROR", gone)], -1
            else:
                initial, cursor = [], int(start)
        for kind, obj in initial:
            self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
        if cursor < 0:
            return self._end_stream()
        last_sent = time.monotonic()
        while time.monotonic() < deadline:
            with c.cond:
                c.cond.wait_for(
                    lambda cur=cursor: (
                        (c.history and c.history[-1][0] > cur) or c.watch_epoch != epoch or c.oldest_rv > cur
                    ),
                    timeout=0.5,
                )
                if c.watch_epoch != epoch:
                    break
                if c.oldest_rv > cursor:
                    gone = ApiStatus(
                        410, "Expired", f"too old resource version: {cursor} ({c.oldest_rv})"
                    ).body()
                    batch: list[tuple[str, dict[str, Any]]] = [("ERROR", gone)]
                    cursor = -1
                else:
                    batch = [(kind, obj) for rv, k, kind, obj in c.history if rv > cursor and wanted(k, obj)]
                    cursor = c.rv
            if batch and c.watch_delay.get(key):
                time.sleep(c.watch_delay[key])
            for kind, obj in batch:
                self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                last_sent = time.monotonic()
            if cursor < 0:
                break
            if bookmarks and time.monotonic() - last_sent > 1.0:
                mark = {
                    "kind": c.types[key].kind,
                    "apiVersion": c.types[key].api_version,
                    "metadata": {"resourceVersion": str(cursor)},
                }
                self._chunk(json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n")
                last_sent = time.monotonic()
        self._end_stream()

    def _pod_log(self, ns: str, name: str, query: dict[str, str]) -> None:
        c = self.cluster
        container = self._container(self._pod(ns, name), query.get("container"))
        with c.cond:
            log = c.logs.get((ns, name))
            if log is None:
                raise ApiStatus(
                    400,
                    "BadRequest",
                    f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating',
                )
            lines = list(log.lines)
        since = float(query["sinceSeconds"]) if "sinceSeconds" in query else None
        if since is not None:
            lines = [ln for ln in lines if ln[0] >= time.time() - since]
        if "tailLines" in query:
            lines = lines[-int(query["tailLines"]) :] if int(query["tailLines"]) > 0 else []
        stamp = query.get("timestamps") == "true"

        def fmt(ts: float, line: bytes) -> bytes:
            prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)).encode() + b"Z " if stamp else b""
            return prefix + line + b"\n"

        if query.get("follow") != "true":
            data = b"".join(fmt(ts, ln) for ts, ln in lines)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self._start_stream("text/plain")
        for ts, ln in lines:
            self._chunk(fmt(ts, ln))
        with c.cond:
            sent = len(c.logs[(ns, name)].lines)
        while True:
            with c.cond:
                log = c.logs[(ns, name)]
                c.cond.wait_for(
                    lambda lg=log, n=sent: (
                        len(lg.lines) > n or lg.closed or c.get("/v1/pods", ns, name) is None
                    ),
                    0.5,
                )
                new, sent = log.lines[sent:], len(log.lines)
                finished = log.closed or ("/v1/pods", ns, name) not in c.objects
            for ts, ln in new:
                self._chunk(fmt(ts, ln))
            if finished and not new:
                break
        self._end_stream()


class FakeApiServer:
    """``FakeCluster`` served over HTTP on 127.0.0.1 (a random free port)."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        handler = type("Handler", (_Handler,), {"cluster": cluster})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )

    def __enter__(self) -> FakeApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cluster.drop_watches()
        self.httpd.shutdown()
        self.httpd.server_close()

    def kubeconfig(self, namespace: str = "team-a") -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}
            ],
            "current-context": "fake",
        }
