"""The Kubernetes workload kinds ("flavours") as strategies, by ``--flavor`` name.

``job`` (Indexed Job + headless Service), ``pytorchjob`` (Kubeflow training operator) and
``t9k`` (T9k PyTorchTrainingJob). The backend never asks which one it has: it calls the
flavour's hooks (``base.Flavor``).
"""

from __future__ import annotations

from collections.abc import Callable

from ....model.errors import InvalidSpecError
from ..client import Resource
from .base import End, Flavor, ReplicaGroup, process_roles
from .job import IndexedJob
from .pytorchjob import PyTorchJob
from .t9k import T9kJob

__all__ = ["BY_NAME", "End", "Flavor", "ReplicaGroup", "discover", "flavor_named", "process_roles"]

# In --flavor's order (``options.FLAVORS``), which is also discovery's preference among operators.
BY_NAME: dict[str, Flavor] = {f.name: f for f in (IndexedJob(), PyTorchJob(), T9kJob())}


def flavor_named(name: str) -> Flavor:
    try:
        return BY_NAME[name]
    except KeyError:
        raise InvalidSpecError(f"--flavor {name!r}: choose one of {', '.join(BY_NAME)}") from None


def discover(served: Callable[[Resource], bool]) -> Flavor:
    """The first flavour whose operator the cluster serves (``served``), else the Indexed Job,
    which every cluster runs."""
    with_operator = (f for f in BY_NAME.values() if f.needs_operator and served(f.resource))
    return next(with_operator, BY_NAME["job"])
