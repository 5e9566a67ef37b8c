"""Runs that are still open when the process ends are written out: at interpreter exit (a normal
end, an uncaught exception, Ctrl-C) and on SIGTERM, which torchrun sends to the surviving ranks
when one fails and the local backend sends on cancel.

The SIGTERM handler writes every waiting point, then hands the signal on to what was there
before: the user's handler is called (a graceful-shutdown handler keeps working, and its run
stays open), and the default action still terminates the process.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import types
from typing import Any, Protocol


class OpenRun(Protocol):
    active: bool

    def _flush(self) -> None: ...
    def _end(self, status: str, reason: str | None) -> None: ...


_open: list[OpenRun] = []
_installed = False
_previous_sigterm: Any = signal.SIG_DFL
_failure: str | None = None  # why the process is ending badly, if it is


def track(run: OpenRun) -> None:
    _install()
    _open.append(run)


def untrack(run: OpenRun) -> None:
    if run in _open:
        _open.remove(run)


def _install() -> None:
    global _installed, _previous_sigterm
    if _installed:
        return
    _installed = True
    atexit.register(_at_exit)
    os.register_at_fork(after_in_child=_forget_in_child)
    previous_hook = sys.excepthook

    def excepthook(kind: type[BaseException], exc: BaseException, tb: types.TracebackType | None) -> None:
        global _failure
        _failure = f"{kind.__name__}: {exc}".splitlines()[0]
        previous_hook(kind, exc, tb)

    sys.excepthook = excepthook
    # Signal handlers can only be set from the main thread; elsewhere atexit alone covers it.
    if threading.current_thread() is threading.main_thread():
        _previous_sigterm = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _on_sigterm)


def _forget_in_child() -> None:
    """A forked child (a DataLoader worker) shares the runs' files but not their writer thread:
    its copies must neither write the parent's waiting points again nor end the run on SIGTERM."""
    for run in _open:
        run.active = False
    _open.clear()


def _at_exit() -> None:
    for run in list(_open):
        run._end("failed" if _failure else "finished", _failure)


def _on_sigterm(signum: int, frame: types.FrameType | None) -> None:
    global _failure
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
