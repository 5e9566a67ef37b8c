"""Change a library's module right after the script imports it, never importing it ourselves.

The rank wrapper patches a few modules (torch's c10d to note the group a rank joined; on a
restart, torch's env:// store and the libraries' resume arguments): ``after_import(name, patch)``
calls ``patch(module)`` once the module's code has run, when the script imports it (at once if it
is imported already). A script that never imports the module pays one ``dict`` look-up per import.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

Patch = Callable[[ModuleType], None]
_pending: dict[str, list[Patch]] = {}
_hooked: list[bool] = []


class _Hook(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of a module that has patches waiting."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _pending:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return None
        load = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            load(module)
            for patch in _pending.pop(fullname, []):
                _apply(patch, module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _apply(patch: Patch, module: ModuleType) -> None:
    try:
        patch(module)
    except Exception:  # a library version we do not know: the script runs unpatched
        import traceback

        print(f"disttrain: could not adapt {module.__name__}; it runs as it is:", file=sys.stderr)
        traceback.print_exc()


def after_import(name: str, patch: Patch) -> None:
    """Call ``patch(module)`` once ``name`` is imported (now, if it is already)."""
    module = sys.modules.get(name)
    if module is not None:
        _apply(patch, module)
        return
    _pending.setdefault(name, []).append(patch)
    if not _hooked:
        sys.meta_path.insert(0, _Hook())
        _hooked.append(True)
