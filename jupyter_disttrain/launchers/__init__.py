"""Launchers by name: how a job's processes are laid out (``--launcher``).

A launcher turns a ``JobSpec`` into roles (``base.Role``) that every backend runs; it declares
its own flags as a dataclass of ``flags.option`` fields. Nothing heavy is imported here: a
launcher module is loaded when a job names it, or when the flags are generated.
"""

from __future__ import annotations

import importlib

from ..model.errors import InvalidSpecError
from .names import BUILTIN, DEFAULT, NAMES

__all__ = ["DEFAULT", "NAMES", "get_launcher", "launcher_class", "option_classes"]

TYPE_CHECKING = False  # not typing's: the local launch path imports this package
if TYPE_CHECKING:
    from .base import Launcher


def launcher_class(name: str) -> type[Launcher]:
    target = BUILTIN.get(name)
    if target is None:
        raise InvalidSpecError(f"unknown launcher {name!r}; choose one of: {', '.join(NAMES)}")
    module, _, attr = target.partition(":")
    cls: type[Launcher] = getattr(importlib.import_module(module), attr)
    return cls


def get_launcher(name: str) -> Launcher:
    return launcher_class(name)()


def option_classes() -> list[type]:
    """The dataclasses declaring the launchers' own flags, in the order of ``NAMES``."""
    return [opts for name in NAMES if (opts := launcher_class(name).options) is not None]
