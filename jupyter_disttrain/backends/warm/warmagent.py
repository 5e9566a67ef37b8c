"""A launcher's side of warm start: ask the job's zygote for its torchrun agent (``spawn``), then
drive that agent as the ``subprocess.Popen`` of a cold one (``WarmAgent``). What a job's plan is,
and where its zygote lives, is ``plan.py``'s."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .plan import (
    ANSWER_TIMEOUT,
    SPAWN_TIMEOUT,
    WarmPlan,
    WarmUnavailable,
    ensure_zygote,
    replace,
    start_for,
    stuck,
    zygote_state,
)
from .zygote_protocol import read_answer


class WarmAgent:
    """A torchrun agent forked by a zygote, driven like the ``subprocess.Popen`` of a cold one:
    its end arrives on the launcher's connection (the agent's own word, else the zygote's), and
    signals go through a pidfd, so a reused pid is never signalled. A ``remote`` agent (forked on
    another machine: a Slurm warm step's) is signalled with a message on the connection instead,
    which the relay at the far end passes on through its own pidfd of the agent."""

    def __init__(
        self,
        conn: socket.socket,
        pid: int,
        buffered: bytes = b"",
        *,
        remote: bool = False,
        answer: dict[str, Any] | None = None,
    ) -> None:
        self.conn = conn
        self.pid = pid
        self.answer = answer or {}  # what the zygote (or a relay for it) answered the request with
        self.last_word: dict[str, Any] = {}  # the message that said how it ended
        self.returncode: int | None = None
        self._pidfd = None if remote else os.pidfd_open(pid)
        self._buffer = b""
        conn.setblocking(False)  # a socket timeout would make even a MSG_DONTWAIT read wait
        self._take(buffered)

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired([f"warm agent {self.pid}"], timeout or 0)
            select.select([self.conn], [], [], left)
            self._read()
        return self.returncode

    def fileno(self) -> int:
        """Readable when the agent's end (or more of its answer) arrives."""
        return self.conn.fileno()

    def send_signal(self, sig: int) -> None:
        if self.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, OSError):
            if self._pidfd is None:
                self.conn.sendall(json.dumps({"op": "signal", "signal": int(sig)}).encode() + b"\n")
            else:
                signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _read(self) -> None:
        try:
            chunk = self.conn.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:  # neither the agent nor the zygote said how it ended: it was killed
            self._ended(-signal.SIGKILL)
            return
        self._take(chunk)

    def _take(self, chunk: bytes) -> None:
        self._buffer += chunk
        while b"\n" in self._buffer and self.returncode is None:
            line, _, self._buffer = self._buffer.partition(b"\n")
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                message = json.loads(line)
                if isinstance(message.get("exit"), int):
                    self.last_word = message  # with ``lost`` when what forked it went mid-run
                    self._ended(message["exit"])

    def _ended(self, code: int) -> None:
        self.returncode = code
        self.conn.close()
        if self._pidfd is not None:
            os.close(self._pidfd)


def spawn(
    plan: WarmPlan, *, job_dir: str, argv: list[str], env: Mapping[str, str], cwd: str, log: str
) -> WarmAgent:
    """Ask the plan's zygote (started now if none lives) for one agent; WarmUnavailable when it
    cannot give one (the launcher then starts the job cold)."""
    # The zygote serves this launcher while its job runs, and who submitted the job (a kernel,
    # a server) as long as that lives. One started here starts with the launcher's environment
    # (the submitter's, whose zygote it is), not the job's.
    owners = [os.getpid(), os.getppid()]
    ensure_zygote(plan, os.environ, owners)
    directory = Path(plan.socket).parent
    if stuck(directory, plan.fingerprint):
        replace(plan, os.environ, owners)
        raise WarmUnavailable("the zygote is stopped (SIGSTOP, a debugger): replaced")
    request = {
        "op": "spawn",
        "owner": owners,
        "fingerprint": plan.fingerprint,
        "job_dir": job_dir,
        "argv": argv,
        "env": dict(env),
        "cwd": cwd,
        "log": log,
        "preload": list(plan.preload),
    }
    ready = zygote_state(directory, plan.fingerprint).get("state") == "ready"
    timeout = ANSWER_TIMEOUT if ready else SPAWN_TIMEOUT
    try:
        return ask(plan.socket, request, timeout)
    except TimeoutError:
        replace(plan, os.environ, owners)
        raise WarmUnavailable(f"the zygote did not answer within {timeout:.0f} s: replaced") from None
    except Refused as exc:
        if exc.replace:
            start_for(plan, os.environ, owners)
        raise


class Refused(WarmUnavailable):
    """The zygote (or whoever answers for it) refused the request; ``replace``: it is no longer
    fork-safe and has ended, a fresh one should start."""

    def __init__(self, message: str, replace: bool = False) -> None:
        super().__init__(message)
        self.replace = replace


def ask(path: str, request: Mapping[str, Any], timeout: float, *, remote: bool = False) -> WarmAgent:
    """Send one spawn request to the zygote protocol's socket at ``path`` (a zygote's, or a Slurm
    keeper's) and return the agent it forked (``remote``: on another machine); TimeoutError when
    no answer came within ``timeout`` (the request is dropped unforked once the connection is
    closed), Refused when the answer is no, WarmUnavailable when nothing answers."""
    conn = _connect(path)
    try:
        conn.settimeout(timeout)
        conn.sendall(json.dumps(request).encode() + b"\n")
        answer, rest = read_answer(conn)
    except TimeoutError:
        conn.close()
        raise
    except (OSError, ValueError) as exc:
        conn.close()
        raise WarmUnavailable(f"the zygote did not answer: {exc}") from None
    if not answer.get("ok"):
        conn.close()
        raise Refused(str(answer.get("error") or "the zygote refused the job"), bool(answer.get("replace")))
    return WarmAgent(conn, int(answer["pid"]), rest, remote=remote, answer=answer)


def _connect(path: str) -> socket.socket:
    """Connect, waiting a little for a zygote that is starting (its socket appears first)."""
    deadline = time.monotonic() + 10.0
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
            return conn
        except OSError as exc:
            conn.close()
            if exc.errno not in (errno.ENOENT, errno.ECONNREFUSED) or time.monotonic() > deadline:
                raise WarmUnavailable(f"no zygote at {path}: {exc.strerror}") from None
            time.sleep(0.02)
