"""What a followed job raises where it was followed (the cell, ``Job.result()``).

``JobFailedError`` when the job failed, ``JobCancelledError`` when it was cancelled. When the
root-cause rank raised an exception whose type the kernel can import (a built-in, a library's,
or a class the notebook defined), the error raised is *that* type as well: a subclass of both,
made on the fly and kept per type, so ``except ZeroDivisionError`` and ``except JobFailedError``
both match it. Its ``str`` and ``args`` are the rank's message as the rank printed it, its
traceback (IPython's ``_render_traceback_``) the rank's, mapped to the cells (``jobs/failure.py``).
A type the kernel cannot import, or cannot subclass, gives today's plain ``JobFailedError``.

No Jupyter here: ``_render_traceback_`` is IPython's protocol, named, not imported.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..payloads.jobs import Failure


class JobFailedError(Exception):
    """A followed job ended Failed: the cell fails, so Run All and nbclient stop.

    IPython shows ``_render_traceback_``: the root-cause rank's traceback as the notebook's own
    error (``Cell In[3], line 9``, the product's frames left out; ``jobs/failure.py``), then one line
    naming the job and the rank (``job_message``). Without a traceback in the rank's log, that
    line alone. ``story``: the job layer's ``Failure``.
    """

    def __init__(self, message: str, story: Failure | None = None) -> None:
        super().__init__(message)
        self.story = story
        self.job_message = message

    def _render_traceback_(self) -> list[str]:
        line = f"JobFailedError: {self.job_message}"
        if self.story is None or not self.story.traceback:
            return [line if type(self) is JobFailedError else f"{line} ({_shown(self)})"]
        return [*self.story.traceback.split("\n"), "", f"\x1b[2m{line}\x1b[0m"]


class JobCancelledError(JobFailedError):
    """A followed job was cancelled: the cell still stops Run All, with one plain line (a cancel
    someone asked for is no error of the job's)."""

    def _render_traceback_(self) -> list[str]:
        return [str(self)]


def _shown(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


# The subclasses made so far, by the rank's type: one per type, so two failures of the same
# kind raise the same class.
_MADE: dict[type, type[JobFailedError]] = {}


def job_error(
    message: str, story: Failure | None, namespace: Mapping[str, Any] | None = None
) -> JobFailedError:
    """The error for a failed job: the rank's own exception type (also a ``JobFailedError``)
    when ``story`` names one the kernel can import, else a plain ``JobFailedError``.

    ``message``: the line naming the job and the root cause (``failure.failure_line``);
    ``namespace``: where the notebook's own classes are (the kernel's user namespace), for a
    type the rank's traceback names without a module (a class of the script's ``__main__``)."""
    cls = rank_type(story.exception, namespace) if story is not None and story.exception else None
    made = _subclass(cls) if cls is not None else None
    if cls is None or made is None or story is None:
        return JobFailedError(message, story)
    said = story.message or ""
    try:
        error = made.__new__(made, *_args(cls, said))  # the rank's type's __init__ may want other arguments
    except Exception:
        return JobFailedError(message, story)
    error.story, error.job_message = story, message
    error.rank_message = said  # type: ignore[attr-defined]
    return error


def _args(cls: type, said: str) -> tuple[Any, ...]:
    """``args`` as the rank's exception had them, where its printed message tells: a
    ``KeyError`` prints the repr of its key (``KeyError: 'lr'``)."""
    if issubclass(cls, KeyError):
        try:
            return (ast.literal_eval(said),)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    return (said,) if said else ()


def _rank_str(self: BaseException) -> str:
    return str(getattr(self, "rank_message", ""))


def _subclass(cls: type) -> type[JobFailedError] | None:
    """``cls`` and ``JobFailedError`` in one class named as ``cls`` is (None where they cannot
    be combined: a type that may not be subclassed, or whose layout conflicts)."""
    made = _MADE.get(cls)
    if made is not None:
        return made
    body = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__str__": _rank_str}
    try:
        made = type(cls.__name__, (cls, JobFailedError), body)
    except TypeError:
        return None
    _MADE[cls] = made
    return made


def rank_type(name: str, namespace: Mapping[str, Any] | None = None) -> type[Exception] | None:
    """The exception class ``name`` (as a traceback prints it: ``ValueError``, ``torch.
    distributed.DistBackendError``, ``MyError`` for a class of ``__main__``) in this process, or
    None. A dotted name is looked up in its module, imported when it is installed here; a bare
    one among the built-ins, then in ``namespace``. Only ``Exception`` subclasses qualify (never
    ``SystemExit`` or ``KeyboardInterrupt``), and never this module's own errors."""
    name = name.strip()
    if not name or not all(part.isidentifier() for part in name.split(".")):
        return None
    if "." not in name:
        found = getattr(builtins, name, None)
        if not _is_error(found) and namespace is not None:
            found = namespace.get(name)
    else:
        found = _dotted(name)
    if not isinstance(found, type) or not issubclass(found, Exception) or issubclass(found, JobFailedError):
        return None
    return found


def _is_error(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, Exception)


def _dotted(name: str) -> Any:
    """``a.b.C`` (or ``a.b.Outer.Inner``): the longest prefix that is a module, then attributes."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        module = sys.modules.get(module_name) or _import(module_name)
        if module is None:
            continue
        obj: Any = module
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
        return obj
    return None


def _import(module_name: str) -> Any:
    """The module when it is installed in this process (imported now), else None."""
    try:
        if importlib.util.find_spec(module_name.split(".")[0]) is None:
            return None
        return importlib.import_module(module_name)
    except Exception:  # not a module, or one that fails to import here: not this type
        return None
