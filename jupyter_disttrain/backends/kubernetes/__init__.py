"""The Kubernetes backend: plain Indexed Job, Kubeflow PyTorchJob or T9k PyTorchTrainingJob.

Importing this package does not import the ``kubernetes`` client; it loads on first cluster use.
"""

from __future__ import annotations

from .backend import KubernetesBackend

__all__ = ["KubernetesBackend"]
