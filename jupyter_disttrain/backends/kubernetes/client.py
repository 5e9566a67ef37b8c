"""A thin dict-in/dict-out layer over the official ``kubernetes`` client.

All objects (built-in kinds and custom resources alike) travel as plain JSON dicts through the
client's own ``ApiClient`` (so kubeconfig, in-cluster tokens, TLS and proxies work as usual),
which keeps one code path for Jobs, PyTorchJobs and T9k jobs. ``kubernetes`` is imported here
only, and only when a client is made.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...model.errors import BackendError
from .. import KUBERNETES_EXTRA, SERVICE_ACCOUNT_DIR
from .. import in_pod_with_service_account as in_cluster

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


@dataclass(frozen=True)
class Resource:
    """One REST resource: where it lives and what RBAC calls it."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def rbac_name(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        out = f"{base}/namespaces/{namespace}/{self.plural}"
        if name:
            out += f"/{name}"
        if sub:
            out += f"/{sub}"
        return out


PODS = Resource("", "v1", "pods", "Pod")
SERVICES = Resource("", "v1", "services", "Service")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
EVENTS = Resource("", "v1", "events", "Event")
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
JOBS = Resource("batch", "v1", "jobs", "Job")
PYTORCHJOBS = Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
T9KJOBS = Resource("batch.tensorstack.dev", "v1beta1", "pytorchtrainingjobs", "PyTorchTrainingJob")
BY_KIND = {r.kind: r for r in (PODS, SERVICES, CONFIGMAPS, EVENTS, JOBS, PYTORCHJOBS, T9KJOBS)}


class ApiError(BackendError):
    """The API server said no. ``status`` is the HTTP status (0: it could not be reached)."""

    def __init__(self, message: str, status: int, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


def _verb(method: str, name: str | None, query: dict[str, Any]) -> str:
    if method == "GET":
        if query.get("watch") in (True, "true"):
            return "watch"
        return "get" if name else "list"
    return {"POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}.get(
        method, method.lower()
    )


def has_kubeconfig() -> bool:
    paths = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    return any(os.path.isfile(p) for p in paths.split(os.pathsep) if p)


class KubeClient:
    """JSON requests against one API server, with errors a notebook user can act on."""

    def __init__(self, api_client: ApiClient, namespace: str | None = None) -> None:
        self.api = api_client
        self.default_namespace = namespace

    @classmethod
    def from_environment(cls) -> KubeClient | None:
        """In-cluster config inside a pod, else the kubeconfig; ``None`` when neither exists."""
        if not in_cluster() and not has_kubeconfig():
            return None
        try:
            from kubernetes import client, config
        except ImportError as exc:  # a base install: say the one command that fixes it
            raise BackendError(
                f"the Kubernetes backend needs the kubernetes client: {KUBERNETES_EXTRA}"
            ) from exc
        if in_cluster():
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            ns = _read(os.path.join(SERVICE_ACCOUNT_DIR, "namespace"))
            return cls(client.ApiClient(configuration), os.environ.get("POD_NAMESPACE") or ns)
        try:
            # The client reads $KUBECONFIG once at import; pass it so a changed value counts.
            path = os.environ.get("KUBECONFIG") or None
            api = config.new_client_from_config(config_file=path)
            _, active = config.list_kube_config_contexts(config_file=path)
            ns = (active or {}).get("context", {}).get("namespace")
        except Exception as exc:  # a broken kubeconfig: say which file to fix
            raise BackendError(f"cannot load the kubeconfig ({exc}); fix it or set KUBECONFIG") from exc
        return cls(api, os.environ.get("POD_NAMESPACE") or ns)

    @property
    def host(self) -> str:
        return str(self.api.configuration.host)

    # -- raw requests --------------------------------------------------------------------
    def _send(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None,
        body: Any,
        timeout: float | tuple[float, float] | None,
        content_type: str = "application/json",
    ) -> Any:
        params = [(k, _qs(v)) for k, v in (query or {}).items() if v is not None]
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            m, url, hdrs, data, _ = self.api.param_serialize(
                method,
                path,
                query_params=params,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            return self.api.call_api(m, url, hdrs, data, _request_timeout=timeout)
        except Exception as exc:
            raise ApiError(f"cannot reach the Kubernetes API at {self.host}: {exc}", 0) from exc

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        resource: Resource | None = None,
        name: str | None = None,
        namespace: str | None = None,
        timeout: float = 30,
        as_json: bool = True,
        content_type: str = "application/json",
    ) -> Any:
        """One request; returns the decoded JSON answer (or text), raises ``ApiError``."""
        resp = self._send(method, path, query, body, timeout, content_type)
        raw = resp.read()
        if resp.status >= 400:
            raise self._error(resp.status, raw, method, path, query or {}, resource, name, namespace)
        if not as_json:
            return raw.decode("utf-8", "replace")
        return json.loads(raw) if raw else None

    def stream(
        self,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        resource: Resource | None = None,
        name: str | None = None,
        namespace: str | None = None,
        read_timeout: float | None = None,
    ) -> Iterator[bytes]:
        """Lines of a streaming GET (watch, follow logs). Closing the iterator closes the socket."""
        resp = self._send("GET", path, query, None, (10, read_timeout) if read_timeout else None)
        if resp.status >= 400:
            raise self._error(resp.status, resp.read(), "GET", path, query or {}, resource, name, namespace)
        raw = resp.response
        try:
            pending = b""
            for chunk in raw.stream(64 * 1024, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                yield from lines
            if pending:
                yield pending
        finally:
            raw.release_conn()

    def _error(
        self,
        status: int,
        raw: bytes,
        method: str,
        path: str,
        query: dict[str, Any],
        resource: Resource | None,
        name: str | None,
        namespace: str | None,
    ) -> ApiError:
        try:
            body = json.loads(raw)
            message, reason = body.get("message", ""), body.get("reason", "")
        except ValueError:
            message, reason = raw.decode("utf-8", "replace")[:300], ""
        if status == 403 and resource is not None:
            verb = _verb(method, name, query)
            what = resource.rbac_name
            if name and not path.endswith("/" + name):  # a subresource such as pods/log
                what = f"{resource.plural}/{path.rsplit('/', 1)[1]}" + (
                    f".{resource.group}" if resource.group else ""
                )
            where = f" in namespace {namespace!r}" if namespace else ""
            return ApiError(
                f"permission denied: this service account may not {verb} {what}{where}; "
                f"ask an admin to apply deploy/rbac.yaml (the Role needs verb {verb!r} on {what!r})",
                403,
                "Forbidden",
            )
        if status == 401:
            return ApiError(
                "the Kubernetes API refused our credentials (401); refresh the kubeconfig", 401, reason
            )
        return ApiError(
            f"Kubernetes API {method} {path}: {status} {message or reason}".strip(), status, reason
        )

    # -- conveniences --------------------------------------------------------------------
    def get(self, res: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self.request(
                "GET", res.path(namespace, name), resource=res, name=name, namespace=namespace
            )
            return obj
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        res = BY_KIND[obj["kind"]]
        ns = obj["metadata"]["namespace"]
        out: dict[str, Any] = self.request("POST", res.path(ns), body=obj, resource=res, namespace=ns)
        return out

    def merge_patch(self, res: Resource, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Change part of an object (RFC 7386 JSON merge patch: lists are replaced whole)."""
        out: dict[str, Any] = self.request(
            "PATCH",
            res.path(namespace, name),
            body=patch,
            resource=res,
            name=name,
            namespace=namespace,
            content_type="application/merge-patch+json",
        )
        return out

    def delete(self, res: Resource, namespace: str, name: str, propagation: str = "Background") -> bool:
        """Delete one object and what it owns; ``False`` when it was already gone."""
        try:
            self.request(
                "DELETE",
                res.path(namespace, name),
                body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation},
                resource=res,
                name=name,
                namespace=namespace,
            )
            return True
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise

    def list_objects(
        self, res: Resource, namespace: str, label_selector: str | None = None
    ) -> dict[str, Any]:
        out: dict[str, Any] = self.request(
            "GET",
            res.path(namespace),
            query={"labelSelector": label_selector},
            resource=res,
            namespace=namespace,
        )
        return out

    def server_version(self) -> tuple[int, int]:
        info = self.request("GET", "/version")
        minor = "".join(ch for ch in str(info.get("minor", "0")) if ch.isdigit())
        return int(info.get("major", "1")), int(minor or 0)

    def api_groups(self) -> dict[str, list[str]]:
        """``{"kubeflow.org": ["v1"], ...}`` from ``/apis`` (API discovery)."""
        info = self.request("GET", "/apis")
        return {g["name"]: [v["version"] for v in g.get("versions", [])] for g in info.get("groups", [])}

    def has_resource(self, res: Resource, groups: dict[str, list[str]] | None = None) -> bool:
        """Whether the server serves ``res`` (``groups``: an ``api_groups()`` answer to reuse)."""
        groups = self.api_groups() if groups is None else groups
        if res.version not in groups.get(res.group, []):
            return False
        found = self.request("GET", f"/apis/{res.group}/{res.version}")
        return any(r.get("name") == res.plural for r in found.get("resources", []))


NO_CLUSTER = (
    "no Kubernetes cluster is configured: run in a pod with a service account or set KUBECONFIG "
    "(a --dry-run needs only --flavor and --image)"
)


class ClusterAccess:
    """The API client a backend talks through: the one given, else one made on first use from
    the environment (in-cluster config or the kubeconfig), or none where there is no cluster."""

    def __init__(self, client: KubeClient | None = None) -> None:
        self._client = client
        self._loaded = client is not None

    def optional(self) -> KubeClient | None:
        """The client; ``None`` when no cluster is configured."""
        if not self._loaded:
            self._client = KubeClient.from_environment()
            self._loaded = True
        return self._client

    def required(self) -> KubeClient:
        """The client, or a ``BackendError`` that says how to configure one."""
        client = self.optional()
        if client is None:
            raise BackendError(NO_CLUSTER)
        return client


def _qs(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None
