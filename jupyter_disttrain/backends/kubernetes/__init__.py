"""The Kubernetes backend: plain Indexed Job, Kubeflow PyTorchJob or T9k PyTorchTrainingJob.

Importing this package does not import the ``kubernetes`` client; it loads on first cluster use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import KubernetesBackend

__all__ = ["KubernetesBackend"]


def __getattr__(name: str) -> Any:
    # The options (and with them the magic's flags) import this package without the backend.
    if name == "KubernetesBackend":
        from .backend import KubernetesBackend

        return KubernetesBackend
    raise AttributeError(name)
