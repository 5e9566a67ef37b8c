"""Backends by name: built-ins plus third parties through the entry-point group
``jupyter_disttrain.backends`` (``name = "package.module:BackendClass"``).

Nothing is imported until a backend is asked for, so ``%load_ext`` stays fast. Each backend
declares its flags in ``Backend.options`` (a dataclass of ``flags.option`` fields);
``option_classes`` gathers those of every registered backend, so a third party's options become
flags of ``%%distrun`` and ``jupyter disttrain run`` too. A built-in backend's options class is
loaded without the backend and its heavy imports.
"""

from __future__ import annotations

import importlib
import os

from ..model.errors import UnknownBackendError

TYPE_CHECKING = False  # not typing's: the launcher imports this package on its critical path
if TYPE_CHECKING:
    from importlib.metadata import EntryPoint
    from typing import Any

    from ..storage.store import JobStore
    from .base import Backend

ENTRY_POINT_GROUP = "jupyter_disttrain.backends"
BACKEND_ENV = "DISTTRAIN_BACKEND"

_BUILTIN = {
    "local": "jupyter_disttrain.backends.local.backend:LocalBackend",
    "kubernetes": "jupyter_disttrain.backends.kubernetes:KubernetesBackend",
    "slurm": "jupyter_disttrain.backends.slurm.backend:SlurmBackend",
}
# The built-ins' ``options`` classes, loadable on their own (the same classes: a test checks).
_BUILTIN_OPTIONS = {
    "local": "jupyter_disttrain.backends.local.options:LocalOptions",
    "kubernetes": "jupyter_disttrain.backends.kubernetes.options:KubeOptions",
    "slurm": "jupyter_disttrain.backends.slurm.options:SlurmOptions",
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


def _registered() -> list[str]:
    """Every backend's name: the built-ins in their order, then the others by name."""
    return [*_BUILTIN, *sorted({ep.name for ep in _entry_points()} - set(_BUILTIN))]


def options_class(name: str) -> type | None:
    """The dataclass declaring backend ``name``'s flags (its ``Backend.options``), or None."""
    target = _BUILTIN_OPTIONS.get(name)
    if target is None:
        return backend_class(name).options
    cls: type = _load(target)
    return cls


def option_classes() -> list[type]:
    """Every registered backend's options class, each once (a subclass may share its parent's).

    A third-party backend that cannot be loaded is left out with a warning: one broken install
    must not take the magic down.
    """
    found: list[type] = []
    for name in _registered():
        try:
            cls = options_class(name)
        except Exception as exc:
            import logging

            logging.getLogger(__name__).warning("backend %r is left out of the flags: %s", name, exc)
            continue
        if cls is not None and cls not in found:
            found.append(cls)
    return found


def option_owner(option: str, besides: str) -> str | None:
    """The first registered backend other than ``besides`` that has the option ``option``."""
    import dataclasses

    for name in _registered():
        cls = options_class(name) if name != besides else None
        if cls is not None and option in {f.name for f in dataclasses.fields(cls)}:
            return name
    return None


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
    cls: type[Backend] = _load(target)
    return cls


def _load(target: str) -> Any:
    """The object ``package.module:name`` names, its module imported on the way."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def get_backend(name: str | None = None, store: JobStore | None = None) -> Backend:
    """An instance of the backend called ``name`` (the default backend when None)."""
    return backend_class(name or default_backend_name())(store)
