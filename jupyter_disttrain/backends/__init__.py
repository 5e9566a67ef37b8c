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
    "slurm": "jupyter_disttrain.backends.slurm.backend:SlurmBackend",
}
# Where Kubernetes mounts a pod's service-account token (and namespace, CA).
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
KUBERNETES_EXTRA = "pip install 'jupyter_disttrain[kubernetes]'"


def _entry_points() -> list[EntryPoint]:
    from importlib.metadata import entry_points  # slow to import; only needed here

    return list(entry_points(group=ENTRY_POINT_GROUP))


def backend_names() -> list[str]:
    names = set(_BUILTIN)
    names.update(ep.name for ep in _entry_points())
    return sorted(names)


def in_pod_with_service_account() -> bool:
    """True inside a pod that has a service account token mounted."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        os.path.join(SERVICE_ACCOUNT_DIR, "token")
    )


def kubernetes_client_available() -> bool:
    """Whether the ``kubernetes`` package can be imported (looked up, not imported: it is slow)."""
    from importlib.util import find_spec

    try:
        return find_spec("kubernetes") is not None
    except (ImportError, ValueError):  # a blocked or half-imported package
        return False


def default_backend_name() -> str:
    """``$DISTTRAIN_BACKEND``; else Kubernetes inside a pod with a service account when the
    ``kubernetes`` client is installed (a base install in a pod stays local); else Slurm inside a
    Slurm allocation of more than one node (its client commands on PATH); else local."""
    chosen = os.environ.get(BACKEND_ENV)
    if chosen:
        return chosen
    if in_pod_with_service_account() and kubernetes_client_available():
        return "kubernetes"
    from .slurm.allocation import default_here  # reads the environment only

    if default_here():
        return "slurm"
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
