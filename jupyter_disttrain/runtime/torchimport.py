"""Whether a rank has imported torch, the same answer warm and cold.

A cold rank imports torch (and with it ``torch.distributed``) when its script does: the rank
wrapper's patches wait for that import (``importhook.after_import``). A warm rank, forked from the
zygote, has torch loaded before its script runs, which says nothing of the script; there the
import statements the rank runs from its start, not the wrapper's own, are traced
(``builtins.__import__``, put back at the first that names torch): torch, or a package the zygote
preloaded whose modules hold a torch module (``import lightning``), is the import a cold rank
would have made. ``importlib.import_module("torch")`` alone is not seen.
"""

from __future__ import annotations

import builtins
import functools
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .importhook import after_import

C10D = "torch.distributed.distributed_c10d"
_TORCH = "torch"
_OURS = __name__.rpartition(".")[0] + "."  # the rank wrapper's package (the pods': disttrain_runtime)
_tracing: list[bool] = []  # a warm rank's imports are traced
_seen: list[bool] = []  # a warm rank has imported torch
_checked: set[str] = set()  # top-level packages seen not to hold torch
_calls: list[Callable[[], None]] = []  # what waits for a warm rank's import of torch


def trace() -> None:
    """Trace this warm rank's imports from now on (before its script runs)."""
    if _tracing:
        return
    _tracing.append(True)
    original = builtins.__import__

    @functools.wraps(original)
    def traced(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        ours = str((globals or {}).get("__name__", "")).startswith(_OURS)
        hit = level == 0 and not ours and _names_torch(name.partition(".")[0])
        try:
            return original(name, globals, locals, fromlist, level)
        finally:
            if hit and not _seen:
                builtins.__import__ = original  # the answer is known: imports run untraced again
                _imported()

    builtins.__import__ = traced


def tracing() -> bool:
    return bool(_tracing)


def seen() -> bool:
    """Whether a warm rank has imported torch (see ``trace``)."""
    return bool(_seen)


def after_torch(call: Callable[[], None]) -> None:
    """Call ``call`` once the rank imports torch.distributed (at once if it has)."""
    if _tracing and not _seen:
        _calls.append(call)
    else:
        after_import(C10D, lambda _module: call())


def _imported() -> None:
    _seen.append(True)
    while _calls:
        call = _calls.pop(0)
        try:
            call()
        except Exception:  # as ``after_import``'s patches: the script's import goes on
            import traceback

            print("disttrain: could not act on torch's import:", file=sys.stderr)
            traceback.print_exc()


def _names_torch(top: str) -> bool:
    if top == _TORCH:
        return True
    if top in _checked or top not in sys.modules:  # not loaded: its own imports are traced
        return False
    _checked.add(top)
    under = [m for name, m in list(sys.modules.items()) if name == top or name.startswith(top + ".")]
    return any(_holds_torch(m) for m in under)


def _holds_torch(module: ModuleType | None) -> bool:
    values = list(getattr(module, "__dict__", {}).values())
    return any(isinstance(v, ModuleType) and v.__name__.partition(".")[0] == _TORCH for v in values)
