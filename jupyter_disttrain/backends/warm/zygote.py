"""The warm zygote: a process that has imported torch and waits to fork a job's agent and ranks.

``python -u -m jupyter_disttrain.backends.warm.zygote DIR FINGERPRINT [--owner PID]... [--idle S]
[--preload MOD,...] (``plan.py`` starts it; users never do). It imports torch,
``torch.distributed``, ``torch.optim``, ``torch._dynamo`` and the heavy libraries asked for, with one
OpenMP/MKL/OpenBLAS thread, never runs a tensor op and never initialises CUDA. Then it serves its
control socket, ``DIR/zygote-FINGERPRINT.sock`` (``DIR`` is this user's 0700 runtime dir; the
socket is 0600 and a peer of another uid is refused), one JSON request per line:

- ``{"op": "spawn", "fingerprint", "job_dir", "argv", "env", "cwd", "log", "preload"}``: fork one
  torchrun agent of a job (``forked.agent_main``) whose script lies in a job dir of this user; the
  answer (``{"ok": true, "pid"}``, later ``{"exit": code}``) comes on the same connection;
- ``{"op": "preload", "modules": [...]}``: import more (the kernel's heavy imports, ahead of a job);
- ``{"op": "ping"}``, ``{"op": "stop"}``.

Before each fork it checks that it is still fork-safe: as many threads as after its imports, CUDA
not initialised. If not, it answers so, says why in its log and exits; the job runs cold and the
next one starts a fresh zygote. It exits after ``--idle`` seconds with no job of its running, once
every process it serves has ended (each ``--owner``: the kernel, server or launcher that started
it; and each a request named since: a job's launcher and who submitted the job), or on SIGTERM;
the jobs it forked run on. It holds ``DIR/zygote-FINGERPRINT.lock`` while it lives (one zygote per
fingerprint; ``plan.start`` takes it before it spawns one and hands it over, ``--lock-fd``, so two
starters at once start one) and keeps ``DIR/zygote-FINGERPRINT.json`` current (pid, state, the
modules it holds).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...runtime import joined
from ...storage.procs import parent_death_signal
from . import forked, fresh
from .fresh import SITE_HOOKS, Interpreter
from .plan import THREAD_ENV, shadowed, stop_stale
from .zygote_protocol import (
    MAX_REQUEST,
    answer,
    fork_unsafe,
    listen,
    peer_left,
    peer_uid,
    read_request,
    threads,
)

# What every job needs, imported once here instead of in every rank: torch and the parts of it a
# training loop reaches first (``torch._dynamo`` is what the first ``optimizer.step()`` imports).
BASE_MODULES = ("torch", "torch.distributed", "torch.nn.parallel", "torch.optim", "torch._dynamo")
# What each rank imports to restore a fresh interpreter's state (``fresh.py``), held here too.
RANK_MODULES = ("site", "tempfile", "threadpoolctl")
REQUEST_TIMEOUT = 10.0  # seconds a client may take to send its request
PRELOAD_TIMEOUT = 300.0  # seconds a successor may take to import what it was asked to hold


class Zygote:
    def __init__(
        self, directory: Path, fingerprint: str, owners: list[int], idle: float, env_key: str
    ) -> None:
        self.dir = directory
        self.fingerprint = fingerprint
        self.env_key = env_key
        self.sock_path = directory / f"zygote-{fingerprint}.sock"
        self.state_path = directory / f"zygote-{fingerprint}.json"
        self.idle = idle
        self.sel = selectors.DefaultSelector()
        self.agents: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, the launcher's connection)
        self.own_fds: set[int] = set()  # closed in every child
        self.owners: dict[int, int] = {}  # pidfd -> pid of a kernel or server this zygote serves
        self.started_for = owners  # serves while one of them, or one it served since, lives
        self.listener: socket.socket | None = None
        self.successor: _Successor | None = None
        self.failed: set[str] = set()  # modules a successor could not hold
        self.baseline = 0
        self.last_active = time.monotonic()
        self.stopping = False
        self.handed_over = False
        self.unsafe: str | None = None
        self.pid = os.getpid()  # a successor's predecessor, as the successor sees it

    # -- life ----------------------------------------------------------------------------------
    def serve(self, lock_fd: int, preload: Iterable[str]) -> int:
        self.own_fds.add(lock_fd)
        self.listener = listen(self.sock_path)  # clients wait there while the imports below run
        self.own_fds.add(self.listener.fileno())
        self._write_state("importing")
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        for owner in self.started_for:  # watched from now: one that ends while it imports ends it
            self._own(owner)
        probe = _ThreadProbe(self.dir / f"threads-{self.fingerprint}.json")
        # The rank wrapper notes the process group a rank joins by wrapping torch's c10d module
        # as it is imported: it must be watching before the imports below import it.
        joined.watch()
        before = dict(os.environ)
        self._import([*BASE_MODULES, *RANK_MODULES])
        fresh.traced_imports(preload, self._import)
        forked.INTERPRETER = _interpreter(probe, before)
        self.baseline = threads()
        self.own_fds.add(self.sel.fileno())
        self._ready()
        return self._serve_loop()

    def _ready(self) -> None:
        """Serve from now on; a zygote of another fingerprint of this environment (before a
        ``pip install``) is stale from now on: it is stopped (its jobs run on)."""
        assert self.listener is not None
        self.last_active = time.monotonic()  # idle from now on
        self._write_state("ready")
        self.sel.register(self.listener, selectors.EVENT_READ, self._accept)
        for pid in stop_stale(self.dir, self.env_key, self.fingerprint):
            self._say(f"stopped the stale zygote {pid} of this environment")

    def _loop(self) -> None:
        while not self.stopping and self.unsafe is None:
            for key, _ in self.sel.select(timeout=1.0):
                key.data(key)
            if self.successor is not None and self.successor.overdue():
                self._say(f"importing {', '.join(self.successor.modules)} hangs: given up")
                self._successor_gone(None)
            if self.handed_over and not self.agents:
                return
            if self.started_for and not self.owners and not self.stopping:  # all ended before it was ready
                self._say("no process it serves is alive: exiting")
                return
            if not self.agents and time.monotonic() - self.last_active > self.idle:
                self._say(f"idle for {self.idle:.0f} s: exiting")
                return

    def _on_term(self, signum: int, frame: object) -> None:
        self.stopping = True

    def _own(self, pid: object) -> None:
        """Serve as long as the process ``pid`` (a kernel or server this zygote serves) lives."""
        if not isinstance(pid, int) or pid <= 1 or pid in self.owners.values():
            return
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return
        self.owners[fd] = pid
        self.own_fds.add(fd)
        self.sel.register(fd, selectors.EVENT_READ, self._owner_gone)

    def _owner_gone(self, key: selectors.SelectorKey) -> None:
        self.sel.unregister(key.fd)
        os.close(key.fd)
        self.own_fds.discard(key.fd)
        pid = self.owners.pop(key.fd)
        if not self.owners:
            self._say(f"the last process it served ({pid}) has ended: exiting")
            self.stopping = True

    # -- requests ------------------------------------------------------------------------------
    def _accept(self, key: selectors.SelectorKey) -> None:
        conn, _ = key.fileobj.accept()  # type: ignore[union-attr]
        self.last_active = time.monotonic()
        with contextlib.ExitStack() as keep:
            keep.callback(conn.close)
            if peer_uid(conn) != os.getuid():
                return  # the directory is 0700 and the socket 0600: only a privileged peer gets here
            conn.settimeout(REQUEST_TIMEOUT)
            try:
                request = read_request(conn)
            except (OSError, ValueError) as exc:
                answer(conn, {"ok": False, "error": f"bad request: {exc}"})
                return
            owners = request.get("owner")
            for owner in owners if isinstance(owners, list) else [owners]:
                self._own(owner)
            op = request.get("op")
            if op == "spawn":
                if self._spawn(conn, request):
                    keep.pop_all()  # the connection now reports that agent's end
            elif op == "preload":
                self._preload(request.get("modules") or [])
                answer(conn, {"ok": True})
            elif op == "ping":
                answer(conn, {"ok": True, "pid": os.getpid(), "fingerprint": self.fingerprint})
            elif op == "stop":
                answer(conn, {"ok": True})
                self.stopping = True
            else:
                answer(conn, {"ok": False, "error": f"unknown op {op!r}"})

    def _spawn(self, conn: socket.socket, request: dict[str, Any]) -> bool:
        """Fork one agent for ``request``; True when it runs (it then owns the answer). What the
        job imports that this zygote does not hold, its ranks import themselves; a successor
        that holds it is prepared meanwhile (``_preload``)."""
        refusal = self._refusal(request) or self._safety()
        if refusal is not None:
            answer(conn, refusal)
            return False
        self._preload(request.get("preload") or [])
        if peer_left(conn):
            self._say("a launcher gave up waiting before its agent was forked: dropped")
            return False
        sys.stdout.flush()
        sys.stderr.flush()
        # Everything imported so far stays out of the children's collections (and out of what
        # they scan at exit): their gc never writes to the pages they share with this process.
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            self.sel = None  # type: ignore[assignment]
            forked.close_fds(self._fds())
            fresh.KEEP = frozenset(m for m in request.get("preload") or () if isinstance(m, str))
            forked.agent_main(conn, request["argv"], request["env"], request["cwd"], request["log"])
        pidfd = os.pidfd_open(pid)
        self.agents[pidfd] = (pid, conn)
        self.sel.register(pidfd, selectors.EVENT_READ, self._reap)
        return True

    def _fds(self) -> set[int]:
        """What a child must not keep open: the zygote's own descriptors, and those of the
        agents it forked before (their pidfds and their launchers' connections)."""
        fds = self.own_fds | set(self.agents) | {conn.fileno() for _, conn in self.agents.values()}
        return fds | (self.successor.fds() if self.successor is not None else set())

    def _reap(self, key: selectors.SelectorKey) -> None:
        """An agent ended: tell its launcher how, unless the agent said so itself."""
        pidfd = key.fd
        self.sel.unregister(pidfd)
        pid, conn = self.agents.pop(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        answer(conn, {"exit": os.waitstatus_to_exitcode(status)})
        conn.close()
        self.last_active = time.monotonic()

    def _refusal(self, request: dict[str, Any]) -> dict[str, Any] | None:
        if request.get("fingerprint") != self.fingerprint:
            return {"ok": False, "error": "another environment's job"}
        try:
            check_job(request)
            why = shadowed(str(request["env"].get("PYTHONPATH", "")), _held_modules())
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            return {"ok": False, "error": str(exc)}
        return {"ok": False, "error": why} if why else None

    def _safety(self) -> dict[str, Any] | None:
        """None while a fork is safe; else the answer that says why, and this zygote ends."""
        self.unsafe = fork_unsafe(self.baseline)
        if self.unsafe is None:
            return None
        self._say(f"no longer fork-safe ({self.unsafe}): exiting so that a fresh zygote replaces it")
        return {"ok": False, "error": f"the zygote is no longer fork-safe: {self.unsafe}", "replace": True}

    # -- imports -------------------------------------------------------------------------------
    def _preload(self, modules: Iterable[object]) -> None:
        """Hold ``modules`` from now on, without ever blocking this loop: a forked successor
        imports them and, once it holds them (and is still fork-safe), takes over the socket;
        this zygote then serves its running jobs to their end. One successor at a time."""
        missing = sorted(
            {m for m in modules if isinstance(m, str) and m not in sys.modules and m not in self.failed}
        )
        if not missing or self.successor is not None or self.handed_over:
            return
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            self._become_successor(missing, ready_w)
        os.close(ready_w)
        self.successor = _Successor(pid, ready_r, missing)
        self.sel.register(self.successor.pidfd, selectors.EVENT_READ, self._successor_gone)
        self.sel.register(ready_r, selectors.EVENT_READ, self._successor_ready)

    def _become_successor(self, modules: list[str], ready_w: int) -> None:
        code = 1
        try:
            # Until it takes over, it ends with its predecessor (an import that hangs included).
            parent_death_signal(signal.SIGKILL)
            if os.getppid() != self.pid:
                return
            self.pid = os.getpid()
            self.baseline = threads()  # a fork has one thread, whatever its parent ran
            forked.close_fds({*self.agents, *(conn.fileno() for _, conn in self.agents.values())})
            self.agents.clear()
            self.sel = selectors.DefaultSelector()  # the inherited one is the predecessor's
            fresh.traced_imports(modules, self._import)
            unsafe = fork_unsafe(self.baseline)
            if unsafe is not None or any(m not in sys.modules for m in modules):
                self._say(f"not holding {', '.join(modules)}: {unsafe or 'could not import it'}")
                return
            self.own_fds = {fd for fd in self.own_fds if fd not in self.owners} | {self.sel.fileno()}
            owners, self.owners = self.owners, {}
            for fd, owner in owners.items():
                os.close(fd)
                self._own(owner)
            parent_death_signal(0)  # it serves on its own from here
            with contextlib.suppress(OSError):  # a predecessor that has gone no longer listens
                os.write(ready_w, b"1")
            os.close(ready_w)
            self._ready()
            self._say(f"now holding {', '.join(modules)}")
            code = self._serve_loop()
        finally:
            os._exit(code)

    def _serve_loop(self) -> int:
        try:
            self._loop()
        finally:
            self._leave()
        return 0

    def _leave(self) -> None:
        if self.listener is not None:  # refused from now on: a new zygote need not wait for us
            self.listener.close()
        if not self.handed_over:  # else the socket and the state are the successor's
            with contextlib.suppress(OSError):
                self.sock_path.unlink()
            with contextlib.suppress(OSError):
                self.state_path.unlink()

    def _successor_ready(self, key: selectors.SelectorKey) -> None:
        """The successor holds what was asked: it serves new requests from now on."""
        assert self.successor is not None and self.listener is not None
        self.sel.unregister(key.fd)
        if os.read(key.fd, 1) != b"1":  # it ended without taking over
            return
        self.sel.unregister(self.listener)
        self.handed_over = True
        self._say(f"handed over to {self.successor.pid}, which holds {', '.join(self.successor.modules)}")

    def _successor_gone(self, key: selectors.SelectorKey | None) -> None:
        successor, self.successor = self.successor, None
        if successor is None:
            return
        if not self.handed_over:
            self.failed.update(successor.modules)
        successor.close(self.sel, kill=key is None)

    def _import(self, modules: Iterable[str]) -> None:
        for name, exc in import_all(modules):  # a job that imports it fails the same way, in its log
            self._say(f"could not import {name}: {type(exc).__name__}: {exc}")

    def _write_state(self, state: str) -> None:
        data = {
            "pid": os.getpid(),
            "fingerprint": self.fingerprint,
            "env_key": self.env_key,
            "state": state,
            "modules": _held_modules(),
        }
        tmp = self.state_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.state_path)

    def _say(self, line: str) -> None:
        print(f"disttrain zygote {os.getpid()}: {line}", flush=True)


class _Successor:
    """A forked zygote importing more modules, which takes over once it holds them."""

    def __init__(self, pid: int, ready_fd: int, modules: list[str]) -> None:
        self.pid = pid
        self.pidfd = os.pidfd_open(pid)
        self.ready_fd = ready_fd
        self.modules = modules
        self.started = time.monotonic()

    def overdue(self) -> bool:
        return time.monotonic() - self.started > PRELOAD_TIMEOUT

    def fds(self) -> set[int]:
        return {self.pidfd, self.ready_fd}

    def close(self, sel: selectors.BaseSelector, *, kill: bool) -> None:
        if kill:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        for fd in self.fds():
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(fd)
            os.close(fd)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def import_all(modules: Iterable[object]) -> list[tuple[str, Exception]]:
    """Import each of ``modules`` not imported yet; those that failed, and how."""
    failed = []
    for name in modules:
        if not isinstance(name, str) or name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:
            failed.append((name, exc))
    return failed


def _held_modules() -> dict[str, str]:
    """Each top-level module this process has imported, and where it was found (a package's
    directory, a module's file; "" for one built in): a job whose PYTHONPATH finds another copy
    first runs cold (``warm.plan``)."""
    held = {}
    for name, module in list(sys.modules.items()):
        if "." in name or name.startswith("_") or name in SITE_HOOKS:  # those rerun in a rank
            continue
        where = getattr(module, "__file__", None) or ""
        if where and hasattr(module, "__path__"):
            where = os.path.dirname(where)
        held[name] = os.path.realpath(where) if where else ""
    return dict(sorted(held.items()))


def check_job(request: dict[str, Any]) -> None:
    """Refuse a request whose script is not in a job dir of this user: the directory and its
    ``job.json`` are ours and not writable by others, and the script is a file inside it."""
    job_dir = Path(os.path.realpath(request["job_dir"]))
    uid = os.getuid()
    for path in (job_dir, job_dir / "job.json"):
        st = os.lstat(path)
        if st.st_uid != uid or st.st_mode & 0o022:
            raise ValueError(f"{path} is not this user's own job file")
    record = json.loads((job_dir / "job.json").read_bytes()[:MAX_REQUEST])
    if record.get("id") != job_dir.name:
        raise ValueError(f"{job_dir} is not the job dir of a job")
    plan = forked.parse_agent(list(request["argv"]))
    script = Path(os.path.realpath(plan.script))
    if script.parent != job_dir or not script.is_file():
        raise ValueError(f"the script {plan.script} is not in the job dir {job_dir}")


class _ThreadProbe:
    """torch's default thread counts and each BLAS/OpenMP pool's default size in a fresh process of
    this environment, which this one (with one thread per pool) cannot ask for: measured once per
    fingerprint by a fresh interpreter, in parallel with the zygote's own imports, and kept beside
    the zygote."""

    CODE = (
        "import json, torch\n"
        "from jupyter_disttrain.backends.warm.fresh import measure_pools\n"
        "try:\n    import numpy\nexcept ImportError:\n    pass\n"
        "print(json.dumps([torch.get_num_threads(), torch.get_num_interop_threads(), measure_pools()]))\n"
    )

    def __init__(self, path: Path) -> None:
        self.path = path
        self.proc: subprocess.Popen[bytes] | None = None
        if self._read() is None:
            env = {k: v for k, v in os.environ.items() if k not in THREAD_ENV}
            self.proc = subprocess.Popen(
                [sys.executable, "-c", self.CODE],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )

    def _read(self, text: str | bytes | None = None) -> tuple[int, int, dict[str, int]] | None:
        try:
            threads, interop, pools = json.loads(self.path.read_text() if text is None else text)
            return int(threads), int(interop), {str(k): int(v) for k, v in pools.items()}
        except (OSError, ValueError, TypeError, AttributeError):
            return None

    def result(self, interop_fallback: int) -> tuple[int, int, dict[str, int]]:
        found = self._read()
        if found is not None:
            return found
        fallback: tuple[int, int, dict[str, int]] = (len(os.sched_getaffinity(0)), interop_fallback, {})
        if self.proc is None:
            return fallback
        try:
            out, _ = self.proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return fallback
        measured = self._read(out)
        if measured is None:
            return fallback
        self.path.write_text(json.dumps(measured))
        return measured


def _interpreter(probe: _ThreadProbe, env_before: dict[str, str]) -> Interpreter:
    """What a fresh interpreter of this environment has, once the zygote has imported: its
    ``sys.path``, default thread counts and pools, and what the imports set in ``os.environ``."""
    import torch

    threads_default, interop_default, pools = probe.result(torch.get_num_interop_threads())
    return Interpreter(
        base_path=tuple(p for p in sys.path[1:] if p not in _own_pythonpath()),
        threads=threads_default,
        interop_threads=interop_default,
        coerced_locale=_coerced_locale(),
        pools=pools,
        import_env={k: v for k, v in os.environ.items() if env_before.get(k) != v},
    )


def _own_pythonpath() -> set[str]:
    return {p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}


def _coerced_locale() -> str | None:
    """The ``LC_CTYPE`` Python set at start (PEP 538), if it did: in ``os.environ`` but not in the
    environment this process was started with (which ``/proc/self/environ`` still shows)."""
    with open("/proc/self/environ", "rb") as f:
        started = {line.partition(b"=")[0] for line in f.read().split(b"\0")}
    value = os.environ.get("LC_CTYPE")
    return value if value is not None and b"LC_CTYPE" not in started else None


def _lock(fd: int, sock: Path, exiting: float = 5.0) -> bool:
    """Take the fingerprint's lock; False while another zygote serves (it answers a ping). One
    that holds it but no longer answers is exiting (it releases the lock as its process ends):
    it is waited for."""
    deadline = time.monotonic() + exiting
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline or _answers(sock):
                return False
            time.sleep(0.05)


def _answers(sock: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(0.5)
            conn.connect(str(sock))
            return True  # connected: it serves (or is importing, its socket bound)
    except OSError:
        return False


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m jupyter_disttrain.backends.warm.zygote")
    parser.add_argument("dir", type=Path)
    parser.add_argument("fingerprint")
    parser.add_argument("--owner", type=int, action="append", default=[])
    parser.add_argument("--idle", type=float, default=1800.0)
    parser.add_argument("--preload", default="")
    parser.add_argument("--env-key", default="")
    parser.add_argument("--lock-fd", type=int, help="the lock, taken by who started it (plan.start)")
    args = parser.parse_args(argv)
    if args.lock_fd is not None:
        lock_fd = args.lock_fd
    else:
        lock_path = args.dir / f"zygote-{args.fingerprint}.lock"
        lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        if not _lock(lock_fd, args.dir / f"zygote-{args.fingerprint}.sock"):
            return 0  # a zygote of this fingerprint is alive: it serves
    zygote = Zygote(args.dir, args.fingerprint, args.owner, args.idle, args.env_key)
    return zygote.serve(lock_fd, [m for m in args.preload.split(",") if m])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
