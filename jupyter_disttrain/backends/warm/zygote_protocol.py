"""The warm zygote's wire protocol and fork-safety checks, shared by whatever serves forks.

One JSON object per line on a Unix stream socket: a request from the client, then answers on the
same connection (``zygote.py`` lists the ops). A server reads a request with a bound in bytes,
refuses a peer of another uid, and drops a request whose client has gone before it forks for it.
A process may fork only while it runs no thread besides the one it had after its imports and has
not initialised CUDA (``fork_unsafe``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import socket
import struct
import sys
from pathlib import Path
from typing import Any

MAX_REQUEST = 1 << 20  # bytes of one request line: the env of a job is the biggest part


def threads() -> int:
    """This process's threads, as the kernel counts them."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise RuntimeError("no Threads line in /proc/self/status")


def fork_unsafe(baseline: int) -> str | None:
    """Why a fork of this process now could deadlock or fail its children, if so: a thread more
    than ``baseline`` (the child would inherit its locks, not the thread), or CUDA initialised."""
    now = threads()
    if now != baseline:
        return f"{now} threads instead of {baseline}: a fork could deadlock"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA was initialised: a fork could not use it"
    return None


def peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def peer_left(conn: socket.socket) -> bool:
    """Whether the client closed its end (it gave up waiting): nothing must be forked for it."""
    poller = select.poll()
    poller.register(conn, select.POLLRDHUP | select.POLLHUP)
    return bool(poller.poll(0))


def read_request(conn: socket.socket) -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            raise ValueError("the connection ended before the request did")
        data += chunk
        if len(data) > MAX_REQUEST:
            raise ValueError(f"a request is at most {MAX_REQUEST} bytes")
    request = json.loads(data)
    if not isinstance(request, dict):
        raise ValueError("a request is a JSON object")
    return request


def answer(conn: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(message).encode() + b"\n")


def read_answer(conn: socket.socket) -> tuple[dict[str, Any], bytes]:
    """The first answer line, and what came after it."""
    data = b""
    while b"\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            raise ValueError("the zygote closed the connection")
        data += chunk
        if len(data) > MAX_REQUEST:
            raise ValueError("an answer over the size of a request")
    line, _, rest = data.partition(b"\n")
    message = json.loads(line)
    if not isinstance(message, dict):
        raise ValueError("not an answer")
    return message, rest


def exchange(path: Path, message: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send one request to the server at ``path`` and return its one answer (OSError when none
    listens, ValueError for an answer that is not one, TimeoutError when none came in time)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(str(path))
        conn.sendall(json.dumps(message).encode() + b"\n")
        return read_answer(conn)[0]


def held(lock: Path) -> bool:
    """Whether a live server holds ``lock`` (it takes it at start and keeps it until it ends)."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def listen(path: Path) -> socket.socket:
    """A server's socket at ``path``, its user's alone (0600), replacing a dead server's (the
    caller holds the lock, so no live one has it)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    old_umask = os.umask(0o177)
    try:
        listener.bind(str(path))
    finally:
        os.umask(old_umask)
    listener.listen(64)
    return listener
