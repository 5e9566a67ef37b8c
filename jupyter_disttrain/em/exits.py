"""Runs that are still open when the process ends are written out: at interpreter exit (a normal
end, an uncaught exception, Ctrl-C) and on SIGTERM, which torchrun sends to the surviving ranks
when one fails and the local backend sends on cancel.

The SIGTERM handler first calls the callbacks ``em.on_preempt`` registered (once: a last
checkpoint), writes every waiting point, then hands the signal on to what was there before: the
user's handler is called (a graceful-shutdown handler keeps working, and its run stays open),
and the default action still terminates the process.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import traceback
import types
from collections.abc import Callable, Iterator
from typing import Any, Protocol


class OpenRun(Protocol):
    active: bool

    def _flush(self) -> None: ...
    def _end(self, status: str, reason: str | None) -> None: ...


_open: list[OpenRun] = []
_installed = False
_sigterm_installed = False
_previous_sigterm: Any = signal.SIG_DFL
_failure: str | None = None  # why the process is ending badly, if it is
_preempt: list[Callable[[], object]] = []
_preempted = False
_writing = 0  # the main thread is writing a run out: SIGTERM's handler waits for it
_deferred: tuple[int, types.FrameType | None] | None = None


def on_preempt(callback: Callable[[], object]) -> None:
    """Call ``callback()`` (no arguments) once when this process is asked to stop gracefully
    (SIGTERM), before the handler that was there gets the signal."""
    if not callable(callback):
        raise TypeError(f"on_preempt: a function of no arguments is needed, not {callback!r}"[:200])
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("on_preempt: call it from the main thread (only it can handle SIGTERM)")
    _install()
    _preempt.append(callback)


def track(run: OpenRun) -> None:
    _install()
    _open.append(run)


def untrack(run: OpenRun) -> None:
    if run in _open:
        _open.remove(run)


def _install() -> None:
    global _installed
    if _installed:
        _install_sigterm()  # a first call from another thread could not
        return
    _installed = True
    atexit.register(_at_exit)
    os.register_at_fork(after_in_child=_forget_in_child)
    previous_hook = sys.excepthook

    def excepthook(kind: type[BaseException], exc: BaseException, tb: types.TracebackType | None) -> None:
        global _failure
        _failure = reason_of(exc)
        previous_hook(kind, exc, tb)

    sys.excepthook = excepthook
    _install_sigterm()


def _install_sigterm() -> None:
    global _sigterm_installed, _previous_sigterm
    # Signal handlers can only be set from the main thread; elsewhere atexit alone covers it.
    if not _sigterm_installed and threading.current_thread() is threading.main_thread():
        _sigterm_installed = True
        _previous_sigterm = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _on_sigterm)


def _forget_in_child() -> None:
    """A forked child (a DataLoader worker) shares the runs' files but not their writer thread:
    its copies must neither write the parent's waiting points again nor end the run on SIGTERM."""
    for run in _open:
        run.active = False
    _open.clear()
    _preempt.clear()


def _run_preempt_callbacks() -> None:
    """Each callback once; one that fails is reported and the stop goes on."""
    global _preempted
    if _preempted:
        return
    _preempted = True
    for callback in list(_preempt):
        try:
            callback()
        except Exception:
            print("em: an on_preempt callback failed:", file=sys.stderr)
            traceback.print_exc()


def _at_exit() -> None:
    for run in list(_open):
        run._end("failed" if _failure else "finished", _failure)


def end_open_runs(exc: BaseException) -> None:
    """Write and end every open run as failed: the script raised ``exc``."""
    global _failure
    _failure = reason_of(exc)
    _at_exit()


def reason_of(exc: BaseException) -> str:
    """``ValueError: bad lr`` (its first line), or the bare name (``KeyboardInterrupt``)."""
    message = str(exc)
    return f"{type(exc).__name__}: {message}".splitlines()[0] if message else type(exc).__name__


@contextlib.contextmanager
def writing() -> Iterator[None]:
    """A write of a run's points or record that SIGTERM must not cut in half. Python runs the
    handler in the main thread between two bytecodes, so one arriving there mid-write would
    find the points already taken from the queue but not yet in the file, and kill the process
    with them: the handler waits until the write is whole, then runs."""
    global _writing, _deferred
    if threading.current_thread() is not threading.main_thread():
        yield  # the handler runs in the main thread only, so another thread's write is never cut
        return
    _writing += 1
    try:
        yield
    finally:
        _writing -= 1
        if not _writing and _deferred is not None:
            signum, frame = _deferred
            _deferred = None
            _on_sigterm(signum, frame)


def _on_sigterm(signum: int, frame: types.FrameType | None) -> None:
    global _failure, _deferred
    if _writing:
        _deferred = (signum, frame)
        return
    _run_preempt_callbacks()
    previous = _previous_sigterm
    if callable(previous) or previous == signal.SIG_IGN:
        for run in list(_open):
            run._flush()
        if callable(previous):
            previous(signum, frame)
        return
    _failure = "terminated (SIGTERM)"
    _at_exit()
    # The default action, as if we had never been here: the exit status says SIGTERM.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
