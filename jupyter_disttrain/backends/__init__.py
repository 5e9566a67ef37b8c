"""Backends by name: built-ins plus third parties through the entry-point group
``jupyter_disttrain.backends`` (``name = "package.module:BackendClass"``), as ``registry.py``
lists them, and the default backend of where the kernel runs.

Nothing is imported until a backend is asked for, so ``%load_ext`` stays fast. Each backend
declares its flags in ``Backend.options`` (a dataclass of ``flags.option`` fields);
``option_classes`` gathers those of every registered backend, so a third party's options become
flags of ``%%distrun`` and ``jupyter disttrain run`` too. A built-in backend's options class is
loaded without the backend and its heavy imports.
"""

from __future__ import annotations

import os

from .registry import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from .registry import backend_names as backend_names
from .registry import backend_target, load
from .registry import option_classes as option_classes
from .registry import option_owner as option_owner
from .registry import options_class as options_class

TYPE_CHECKING = False  # not typing's: the launcher imports this package on its critical path
if TYPE_CHECKING:
    from ..storage.store import JobStore
    from .base import Backend

BACKEND_ENV = "DISTTRAIN_BACKEND"
# Where Kubernetes mounts a pod's service-account token (and namespace, CA).
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
KUBERNETES_EXTRA = "pip install 'jupyter_disttrain[kubernetes]'"


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
    cls: type[Backend] = load(backend_target(name))
    return cls


def get_backend(name: str | None = None, store: JobStore | None = None) -> Backend:
    """An instance of the backend called ``name`` (the default backend when None)."""
    return backend_class(name or default_backend_name())(store)
