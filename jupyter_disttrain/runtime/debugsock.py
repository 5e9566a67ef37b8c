"""Each rank's Flight Recorder and Python stacks, served on a Unix socket in its job dir.

torch serves its debug handlers, ``fr_trace_json`` (the Flight Recorder: the rank's last
collectives, on by default) and ``dump_traceback`` (every thread's Python stack), from a C++ HTTP
server of its own, ``_WorkerServer``, which binds a Unix socket when given a path (port -1). It
answers from its own thread while the rank waits inside a collective. torch's debug frontend
(``torch.distributed.debug.start_debug_server``) binds that server on every interface and adds an
HTTP page on a TCP port, so it is not used: only the socket is, ``<job dir>/flightrec/<replica>.sock``
(0600, in a 0700 dir inside the 0700 job dir), bound through ``/proc/self/fd`` so a deep job dir
fits the 108 bytes of a socket's name.

The rank wrapper calls ``serve`` before the script runs; the server starts when the script imports
``torch.distributed`` (a script that never does pays nothing and has no socket). ``collect`` asks
every socket of a job dir at once, each read bounded in time and bytes; ``python -m
jupyter_disttrain.runtime.debugsock JOB_DIR`` prints what it read as JSON (on a Slurm node through
srun, in a pod through ``pods/exec``, where this module is ``disttrain_runtime.debugsock``).
Standard library only, like all of the runtime.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any

from . import contract, torchimport

FLIGHT_RECORDER = "fr_trace_json"
STACKS = "dump_traceback"
TIMEOUT = 3.0  # seconds one answer may take: a rank blocked in native code holding the GIL never answers
MAX_ANSWER = 16 * 2**20  # bytes of one answer (2,000 entries are about 1 MB)
KEEP_ENTRIES = 256  # of a rank's newest Flight Recorder entries kept in what is collected
_SHORT = 100  # socket names longer than this are reached through /proc/self/fd
_server: list[Any] = []


# -- the rank's side -------------------------------------------------------------------------------
def serve(job_dir: str, replica: str) -> None:
    """Serve this rank's Flight Recorder and stacks once the script imports torch.distributed."""
    torchimport.after_torch(lambda: _start(job_dir, replica))


def _start(job_dir: str, replica: str) -> None:
    try:
        from torch._C._distributed_c10d import _WorkerServer
    except ImportError:  # a torch without it: the diagnosis says this rank has no socket
        return
    if _server:
        return
    folder = os.path.join(job_dir, contract.FLIGHT_RECORDER_DIR)
    name = contract.flight_recorder_socket(replica)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=fd)  # a restarted rank's, or an earlier attempt's
        old = os.umask(0o177)
        try:
            with _quiet_stderr():  # torch says "Server listening to UNIX ..." on every start
                server = _WorkerServer(f"/proc/self/fd/{fd}/{name}", -1)
        finally:
            os.umask(old)
    except (OSError, RuntimeError) as exc:
        print(f"disttrain: no debug socket for {replica} (no collective diagnosis): {exc}", file=sys.stderr)
        return
    # Never destroyed: its destructor would print "Server shutting down" into the rank's log, and
    # a rank that ends with os._exit (the wrapper's way, runtime/worker.py) would not run it anyway.
    _server.append(server)
    import ctypes

    ctypes.pythonapi.Py_IncRef(ctypes.py_object(server))
    atexit.register(_remove, fd, name)


def _remove(fd: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=fd)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


# -- asking a socket ---------------------------------------------------------------------------
class NoAnswer(Exception):
    """A socket that does not answer, or answers with an error; the message says which."""


def ask(path: str, handler: str, timeout: float = TIMEOUT, limit: int = MAX_ANSWER) -> bytes:
    """The body of ``handler``'s answer on the socket ``path``, within ``timeout`` seconds and
    ``limit`` bytes."""
    deadline = time.monotonic() + timeout
    with _connected(path, timeout) as sock:
        request = f"POST /handler/{handler} HTTP/1.1\r\nHost: rank\r\nContent-Length: 0\r\n"
        sock.sendall((request + "Connection: close\r\n\r\n").encode())
        data = bytearray()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NoAnswer(f"no answer within {timeout:g} s")
            sock.settimeout(left)
            try:
                chunk = sock.recv(1 << 16)
            except TimeoutError:
                raise NoAnswer(f"no answer within {timeout:g} s") from None
            if not chunk:
                break
            data += chunk
            if len(data) > limit:
                raise NoAnswer(f"an answer of more than {limit} bytes")
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if len(status) < 2 or status[1] != b"200":
        raise NoAnswer(f"answered {b' '.join(status[1:]).decode('ascii', 'replace') or 'nothing'}")
    return body


@contextlib.contextmanager
def _connected(path: str, timeout: float) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    folder_fd = None
    try:
        sock.settimeout(timeout)
        where = path
        if len(path.encode()) > _SHORT:
            folder_fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            where = f"/proc/self/fd/{folder_fd}/{os.path.basename(path)}"
        try:
            sock.connect(where)
        except FileNotFoundError:
            raise NoAnswer("its socket is gone (the process ended)") from None
        except ConnectionRefusedError:
            raise NoAnswer(
                "nothing listens on its socket (the process ended, or runs on another host)"
            ) from None
        except TimeoutError:
            raise NoAnswer(f"no answer within {timeout:g} s") from None
        except OSError as exc:
            raise NoAnswer(f"cannot connect: {exc.strerror or exc}") from None
        yield sock
    finally:
        sock.close()
        if folder_fd is not None:
            os.close(folder_fd)


# -- one job's sockets ---------------------------------------------------------------------------
def sockets(job_dir: str) -> dict[str, str]:
    """The debug sockets in ``job_dir``, by replica."""
    folder = os.path.join(job_dir, contract.FLIGHT_RECORDER_DIR)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return {}
    return {n[: -len(".sock")]: os.path.join(folder, n) for n in names if n.endswith(".sock")}


def trimmed(dump: dict[str, Any], keep: int = KEEP_ENTRIES) -> dict[str, Any]:
    """A Flight Recorder dump with its newest ``keep`` entries, without their stack frames (what
    the analysis reads; the rest would only make the answer bigger)."""
    found = dump.get("entries")
    entries: list[Any] = found if isinstance(found, list) else []
    kept = [{k: v for k, v in e.items() if k != "frames"} for e in entries[-keep:] if isinstance(e, dict)]
    return {**dump, "entries": kept}


def read_rank(path: str, timeout: float = TIMEOUT, stacks: bool = True) -> dict[str, Any]:
    """What one rank's socket answers: ``fr`` (its Flight Recorder dump, trimmed), ``stack`` (its
    threads' stacks as faulthandler writes them; not asked without ``stacks``) and ``errors``
    (handler -> why it has none)."""
    from concurrent.futures import ThreadPoolExecutor  # (not at the rank's start: serve needs none)

    out: dict[str, Any] = {"fr": None, "stack": None, "errors": {}}
    with ThreadPoolExecutor(2) as pool:  # the stacks need the GIL; the Flight Recorder does not
        asked = [(FLIGHT_RECORDER, pool.submit(ask, path, FLIGHT_RECORDER, timeout))]
        if stacks:
            asked.append((STACKS, pool.submit(ask, path, STACKS, timeout)))
        for handler, future in asked:
            try:
                body = future.result()
                if handler == FLIGHT_RECORDER:
                    out["fr"] = trimmed(json.loads(body))
                else:
                    out["stack"] = body.decode("utf-8", "replace")
            except (NoAnswer, ValueError, AttributeError) as exc:
                out["errors"][handler] = str(exc) or type(exc).__name__
    return out


def collect(
    job_dir: str, timeout: float = TIMEOUT, replicas: list[str] | None = None, stacks: bool = True
) -> dict[str, Any]:
    """Every rank's answer (``read_rank``) of the sockets in ``job_dir`` (those of ``replicas``),
    asked all at once: the whole takes about ``timeout`` at most."""
    found = sockets(job_dir)
    if replicas is not None:
        found = {r: p for r, p in found.items() if r in replicas}
    if not found:
        return {}
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(32, len(found))) as pool:
        futures = {replica: pool.submit(read_rank, path, timeout, stacks) for replica, path in found.items()}
        return {replica: future.result() for replica, future in futures.items()}


def main(argv: list[str]) -> int:
    """``JOB_DIR [TIMEOUT]``: print ``collect``'s answer as one JSON line."""
    if not 1 <= len(argv) <= 2:
        print("usage: python -m jupyter_disttrain.runtime.debugsock JOB_DIR [TIMEOUT]", file=sys.stderr)
        return 2
    timeout = float(argv[1]) if len(argv) > 1 else TIMEOUT
    print(json.dumps(collect(argv[0], timeout), separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
