"""One exchange with a rank's debugger: a request in, pdb's output until its next prompt out.

A rank that stops in ``breakpoint()`` listens on ``<job dir>/debug/<replica>.sock`` (0600,
``debugger.py``). Each exchange is one connection: the client sends one JSON line, ``{"line":
"p x"}`` (a pdb command) or ``{"peek": true}`` (what pdb said last, nothing sent), and reads one
JSON answer until the rank closes it: ``{"output": text, "open": bool, "quit": bool}`` (``open``
false once pdb went on, ``quit`` when the user asked to end the job). Being one connection per
exchange, it goes through any relay that runs a command: ``srun`` on a Slurm node, ``pods/exec``
in a pod (``python -m jupyter_disttrain.runtime.debugrelay SOCKET REQUEST`` prints the answer).

Standard library only: pods and Slurm nodes run it with the rank's own Python.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from typing import Any

MAX_REQUEST = 64 * 1024  # a command line
MAX_ANSWER = 1024 * 1024  # pdb's output of one exchange (a long ``pp``); the rest is cut
# An AF_UNIX path is at most 108 bytes: a longer one is reached through its directory's fd.
_SUN_PATH = 100


class RelayError(Exception):
    """No answer: the rank took too long, or its answer was broken."""


class NoDebugger(RelayError):
    """No prompt listens there (the rank went on, ended, or never stopped)."""


@contextlib.contextmanager
def short_path(path: str) -> Any:
    """``path``, or (when too long for AF_UNIX) the same file through ``/proc/self/fd`` of its
    directory, open while the block runs."""
    if len(os.fsencode(path)) <= _SUN_PATH:
        yield path
        return
    folder, name = os.path.split(path)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        yield f"/proc/self/fd/{fd}/{name}"
    finally:
        os.close(fd)


def exchange(path: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send ``request`` to the debugger listening on ``path``; its answer."""
    data = json.dumps(request).encode() + b"\n"
    if len(data) > MAX_REQUEST:
        raise RelayError(f"a debugger command is at most {MAX_REQUEST // 1024} KiB")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        with short_path(path) as where:
            try:
                sock.connect(where)
            except (FileNotFoundError, ConnectionRefusedError):
                raise NoDebugger("no debugger prompt waits there (the rank went on, or ended)") from None
            except OSError as exc:
                raise NoDebugger(f"cannot reach the rank's debugger: {exc.strerror or exc}") from None
        sock.sendall(data)
        chunks, size = [], 0
        while size <= MAX_ANSWER:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                raise RelayError(
                    f"the rank did not answer within {timeout:.0f} s (it is still running "
                    "what it was told; look again)"
                ) from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        sock.close()
    return parse_answer(b"".join(chunks))


def parse_answer(data: bytes) -> dict[str, Any]:
    try:
        answer = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        raise RelayError("the rank's debugger gave no answer (it may have ended)") from None
    if not isinstance(answer, dict):
        raise RelayError("the rank's debugger gave a broken answer")
    return {
        "output": str(answer.get("output", "")),
        "open": bool(answer.get("open", False)),
        "quit": bool(answer.get("quit", False)),
    }


def main(argv: list[str]) -> int:
    """``SOCKET REQUEST_JSON [TIMEOUT]``: print the answer as JSON (exit 0), or the error (exit 1)."""
    if len(argv) not in (2, 3):
        print(
            "usage: python -m jupyter_disttrain.runtime.debugrelay SOCKET REQUEST_JSON [TIMEOUT]",
            file=sys.stderr,
        )
        return 2
    try:
        request = json.loads(argv[1])
        path = os.path.expandvars(argv[0])  # in a pod: $DISTTRAIN_JOB_DIR/debug/<replica>.sock
        answer = exchange(
            path, request if isinstance(request, dict) else {}, float(argv[2]) if len(argv) == 3 else 60.0
        )
    except (RelayError, ValueError) as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
