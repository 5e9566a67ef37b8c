"""Backends by name: built-ins plus third parties through the entry-point group
``jupyter_disttrain.backends`` (``name = "package.module:BackendClass"``).

Nothing is imported until a backend is asked for, so ``%load_ext`` stays fast.
"""

from __future__ import annotations

import importlib
import os

from ..errors import UnknownBackendError

TYPE_CHECKING = False  # not typing's: the launcher imports this package on its critical path
if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from ..store import JobStore
    from .base import Backend

ENTRY_POINT_GROUP = "jupyter_disttrain.backends"
BACKEND_ENV = "DISTTRAIN_BACKEND"

_BUILTIN = {
    "local": "jupyter_disttrain.backends.local:LocalBackend",
    "kubernetes": "jupyter_disttrain.backends.kubernetes:KubernetesBackend",
}
_SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def _entry_points() -> list[EntryPoint]:
    from importlib.metadata import entry_points  # slow to import; only needed here

    return list(entry_points(group=ENTRY_POINT_GROUP))


def backend_names() -> list[str]:
    names = set(_BUILTIN)
    names.update(ep.name for ep in _entry_points())
    return sorted(names)


def default_backend_name() -> str:
    """``$DISTTRAIN_BACKEND``; else Kubernetes inside a pod with a service account; else local."""
    chosen = os.environ.get(BACKEND_ENV)
    if chosen:
        return chosen
    if os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.exists(_SERVICE_ACCOUNT_TOKEN):
        return "kubernetes"
    return "local"


def backend_class(name: str) -> type[Backend]:
    target = _BUILTIN.get(name)
    if target is None:
        for ep in _entry_points():
            if ep.name == name:
                target = ep.value
                break
    if target is None:
        raise UnknownBackendError(f"unknown backend {name!r}; choose one of: {', '.join(backend_names())}")
    module, _, attr = target.partition(":")
    cls: type[Backend] = getattr(importlib.import_module(module), attr)
    return cls


def get_backend(name: str | None = None, store: JobStore | None = None) -> Backend:
    """An instance of the backend called ``name`` (the default backend when None)."""
    return backend_class(name or default_backend_name())(store)
