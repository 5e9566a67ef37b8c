"""Which backends there are and what options each declares, without loading a backend.

The built-ins by name plus third parties through the entry-point group
``jupyter_disttrain.backends`` (``name = "package.module:BackendClass"``). A built-in's options
class loads without its backend and its heavy imports, so the magic's flags cost no more than
it. Nothing here names the ``Backend`` class: the base backend asks ``option_owner`` as it
resolves a job's options, and the package's ``backend_class`` loads what ``backend_target`` names.
"""

from __future__ import annotations

import importlib

from ..model.errors import UnknownBackendError

TYPE_CHECKING = False  # not typing's: the launcher imports the registry on its critical path
if TYPE_CHECKING:
    from importlib.metadata import EntryPoint
    from typing import Any

ENTRY_POINT_GROUP = "jupyter_disttrain.backends"

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


def backend_target(name: str) -> str:
    """Where backend ``name``'s class is (``package.module:Class``), or a one-line error."""
    target = _BUILTIN.get(name)
    if target is None:
        for ep in _entry_points():
            if ep.name == name:
                target = ep.value
                break
    if target is None:
        raise UnknownBackendError(f"unknown backend {name!r}; choose one of: {', '.join(backend_names())}")
    return target


def options_class(name: str) -> type | None:
    """The dataclass declaring backend ``name``'s flags (its ``Backend.options``), or None."""
    target = _BUILTIN_OPTIONS.get(name)
    if target is None:
        options: type | None = load(backend_target(name)).options
        return options
    cls: type = load(target)
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


def load(target: str) -> Any:
    """The object ``package.module:name`` names, its module imported on the way."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
