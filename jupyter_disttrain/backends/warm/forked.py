"""What runs in the processes a warm zygote forks: a job's torchrun agent, and its ranks.

A warm job's agent does what ``torchrun --nproc-per-node=N --max-restarts=M`` does, in a fork of
the zygote instead of a fresh interpreter: it serves the loopback store the ranks meet in, forks
the ranks with torchrun's environment, watches them (a failed rank stops the others, as
torchrun's agent does), and while restarts are left forks the group afresh as torchrun restarts
it (one node only: restarts of several nodes take new rendezvous rounds, so they run cold); then
it writes torchrun's own failure report into the agent's log and exits as torchrun would. Each
rank then runs the unchanged script through the same rank wrapper as a cold rank
(``runtime/worker.py``): its log, its record, its stack-dump signal and its teardown rules are the
cold path's own.

What a fork inherits that a fresh interpreter would not have is undone here: the zygote's
environment (replaced by the process's own, also where ``/proc/PID/environ`` shows it, so that
cancel and stack dumps find the process by its job id), its signal handlers, its open
descriptors, and in a rank the rest of a fresh interpreter's state (``fresh.py``: ``sys.path``,
site hooks, thread pools, random states).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import selectors
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...runtime import contract
from ...runtime.atomic import open_own
from ..agents.torchrun import WORKER_MODULE
from . import tee
from .fresh import Interpreter, restore, site_hooks
from .group import Joined, Placement, join_interruptibly, one_node
from .plan import MULTI_NODE_RESTARTS
from .zygote_protocol import threads

# torchrun's own: the signals its agent passes on to the ranks, how often it looks at them
# (``--monitor-interval``) and how long its ``close`` waits before SIGKILL.
AGENT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
SIGNALS_TO_HANDLE = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
MONITOR_INTERVAL = 0.1
CLOSE_TIMEOUT = 30.0
# Signals whose handlers a fresh interpreter sets itself (the rest start at their defaults).
_PYTHON_IGNORES = (signal.SIGPIPE, signal.SIGXFSZ)


@dataclass(frozen=True)
class AgentPlan:
    """One torchrun agent's command line, as torchrun's own parser reads it (``options``)."""

    nproc: int
    run_id: str
    script: str
    args: list[str]
    local_addr: str
    nodes: int = 1
    role: str = "default"
    options: Any = None  # torchrun's parsed arguments: what a multi-node agent joins with
    max_restarts: int = 0


def parse_agent(argv: list[str]) -> AgentPlan:
    """``PYTHON -m torch.distributed.run ... -m WORKER_MODULE SCRIPT ARGS``; ValueError for what a
    warm agent does not do (restarts of several nodes, an elastic number of nodes, another
    program). Read in the agent's own environment: torchrun's ``PET_*`` variables fill what the
    line leaves out."""
    from torch.distributed.run import parse_args, parse_min_max_nnodes

    if argv[1:3] != ["-m", "torch.distributed.run"]:
        raise ValueError("not a torchrun command line")
    args = parse_args(argv[3:])
    if not args.module or args.training_script != WORKER_MODULE or not args.training_script_args:
        raise ValueError(f"torchrun runs {args.training_script!r}, not the rank wrapper")
    low, high = parse_min_max_nnodes(str(args.nnodes))
    if low != high:
        raise ValueError("an elastic number of nodes runs cold")
    if args.max_restarts and high > 1:
        raise ValueError(MULTI_NODE_RESTARTS)
    script, *rest = args.training_script_args
    local = args.local_addr or "127.0.0.1"
    nproc, restarts = int(args.nproc_per_node), int(args.max_restarts)
    return AgentPlan(nproc, args.rdzv_id, script, rest, local, high, args.role, args, restarts)


def rank_envs(
    base: Mapping[str, str], plan: AgentPlan, place: Placement, attempt_dir: str, restart: int = 0
) -> list[dict[str, str]]:
    """The environment torchrun's agent gives each rank of its node in attempt ``restart``: its
    own environment (with ``TORCHELASTIC_SIGNALS_TO_HANDLE``, which its launcher sets there), then
    the rank's place in the group, where the store is and where an uncaught error goes (torch
    2.13, ``LocalElasticAgent._start_workers`` and ``SubprocessContext``)."""
    envs = []
    for local_rank in range(plan.nproc):
        signals = base.get("TORCHELASTIC_SIGNALS_TO_HANDLE", SIGNALS_TO_HANDLE)
        env = {
            **base,
            "TORCHELASTIC_SIGNALS_TO_HANDLE": signals,
        }
        env.update(
            {
                "RANK": str(place.base_rank + local_rank),
                "GROUP_RANK": str(place.group_rank),
                "ROLE_RANK": str(place.base_role_rank + local_rank),
                "ROLE_NAME": plan.role,
                "LOCAL_WORLD_SIZE": str(plan.nproc),
                "WORLD_SIZE": str(place.world_size),
                "GROUP_WORLD_SIZE": str(place.group_world_size),
                "ROLE_WORLD_SIZE": str(place.role_world_size),
                "MASTER_ADDR": place.master_addr,
                "MASTER_PORT": str(place.master_port),
                "TORCHELASTIC_RESTART_COUNT": str(restart),
                "TORCHELASTIC_MAX_RESTARTS": str(plan.max_restarts),
                "TORCHELASTIC_RUN_ID": place.run_id,
                "TORCHELASTIC_USE_AGENT_STORE": str(place.use_agent_store),
                "TORCH_NCCL_ASYNC_ERROR_HANDLING": base.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
                "LOCAL_RANK": str(local_rank),
                "TORCHELASTIC_ERROR_FILE": os.path.join(attempt_dir, str(local_rank), "error.json"),
            }
        )
        envs.append(env)
    return envs


# -- what every forked process does first ----------------------------------------------------------
def become(env: Mapping[str, str]) -> None:
    """Make ``env`` this process's whole environment: ``os.environ`` (and with it the C library's,
    which libraries read), and the block ``/proc/PID/environ`` shows, which a fork keeps as the
    zygote's own (the zygote starts with room to spare for it)."""
    os.environ.clear()
    os.environ.update(env)
    _show_environ(env)


def _show_environ(env: Mapping[str, str]) -> None:
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    fields = stat[stat.rindex(b")") + 2 :].split()
    start, end = int(fields[47]), int(fields[48])  # env_start, env_end: fields 50 and 51 of proc(5)
    # Job bookkeeping first: were the block too small, what finds the process still fits.
    first = [k for k in (contract.JOB_ID_ENV, contract.JOB_DIR_ENV) if k in env]
    blob = b"".join(f"{k}={env[k]}".encode() + b"\0" for k in [*first, *(k for k in env if k not in first)])
    blob = blob[: end - start]
    blob = blob[: blob.rfind(b"\0") + 1] if len(blob) == end - start else blob
    ctypes.memmove(start, blob + b"\0" * (end - start - len(blob)), end - start)


def _as_started(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` as a fresh interpreter of the zygote's kind would show it once started. The locale
    variables are the zygote's own (they are part of its fingerprint), so is its coercion."""
    out = dict(env)
    coerced = INTERPRETER.coerced_locale if INTERPRETER is not None else None
    if coerced is not None and "LC_ALL" not in out and "LC_CTYPE" not in out:
        out["LC_CTYPE"] = coerced
    return out


def close_fds(fds: Iterable[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _redirect(path: str) -> None:
    fd = open_own(path, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _send(conn: socket.socket, message: dict[str, object]) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def _fresh_signals() -> None:
    """Signal dispositions as a fresh interpreter has them."""
    signal.set_wakeup_fd(-1)
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in _PYTHON_IGNORES:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


# -- the agent ---------------------------------------------------------------------------------------
def agent_main(conn: socket.socket, argv: list[str], env: dict[str, str], cwd: str, log_path: str) -> None:
    """Run one node's ranks as torchrun's agent would, then ``os._exit`` with its exit code, also
    sent on ``conn`` (the launcher's connection: the zygote may have gone by then)."""
    code = 1
    try:
        os.setsid()
        _fresh_signals()
        become(_as_started(env))
        os.chdir(cwd)
        _redirect(log_path)
        _send(conn, {"ok": True, "pid": os.getpid()})
        if INTERPRETER is not None:  # torchrun's own interpreter runs them too, and its ranks inherit
            site_hooks(INTERPRETER, os.environ)  # what they set in its environment
        code = _Agent(conn, parse_agent(argv)).run()
    except BaseException as exc:  # the agent ends here, whatever happened
        with contextlib.suppress(Exception):
            print(f"disttrain warm agent: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    finally:
        with contextlib.suppress(Exception):
            _send(conn, {"exit": code})
        os._exit(code)


class _Agent:
    def __init__(self, conn: socket.socket, plan: AgentPlan) -> None:
        self.conn = conn
        self.plan = plan
        self.running: dict[int, int] = {}  # pid -> local rank
        self.pids: dict[int, int] = {}  # local rank -> pid
        self.codes: dict[int, int] = {}  # local rank -> exit code (negative: killed by that signal)
        self.failed: dict[int, int] = {}  # the failed ranks of the last attempt, and their codes
        self.stopping: signal.Signals | None = None
        self.error_files: list[str] = []
        self.store_alive = -1  # a store served apart: the pipe whose end tells it the agent ended
        self.tailer: int | None = None  # the process copying tee'd streams (``tee.py``)
        self.tail_pipe = -1  # its pipe: the files to copy, then its end once the ranks have ended

    def run(self) -> int:
        # The ranks' error files where torchrun's agent puts them (torch 2.13, DefaultLogsSpecs.
        # _make_log_dir): --log-dir/<run id>_<random>/attempt_K; a fresh temporary dir, removed
        # here at the end, where the command line names none.
        given = getattr(self.plan.options, "log_dir", None)
        base = given or tempfile.mkdtemp(prefix="torchelastic_")
        try:
            os.makedirs(base, exist_ok=True)
            return self._run(tempfile.mkdtemp(prefix=f"{self.plan.run_id}_", dir=base))
        finally:
            if not given:
                shutil.rmtree(base, ignore_errors=True)

    def _run(self, run_dir: str) -> int:
        # The ranks are forked first, each waiting on a pipe for its environment: the store and the
        # rendezvous run threads of their own, and nothing may be forked once they do.
        pipes = self._fork_ranks()
        for sig in AGENT_SIGNALS:  # a cancel while the agents meet ends the wait, as torchrun's
            signal.signal(sig, _raise_stopped)
        joined: Joined | None = None
        store: object = None
        try:
            if self.plan.nodes == 1:
                from ...runtime.rendezvous import loopback_listener, serve_store

                listener = loopback_listener(0)
                place = one_node(
                    self.plan.nproc, self.plan.run_id, self.plan.local_addr, listener.getsockname()[1]
                )
                # Served from here as torchrun's agent serves it; by a process of its own when the
                # group may restart: this one forks each attempt's ranks, so it keeps no thread.
                if self.plan.max_restarts:
                    self._serve_apart(listener, pipes)
                else:
                    store = serve_store(listener)
            else:
                joined = join_interruptibly(self.plan.options)
                place = joined.place
        except BaseException as exc:
            close_fds(pipes)  # each rank gets no environment and ends, having run nothing
            self._end_tail()
            while self.running:
                self._reap()
                time.sleep(0.01)
            if isinstance(exc, _Stopped):
                print(f"Received {exc.signal.name} death signal, shutting down workers", file=sys.stderr)
                return 1
            raise
        for sig in AGENT_SIGNALS:
            signal.signal(sig, self._on_signal)
        restart = 0
        while True:
            code = self._attempt(pipes, place, os.path.join(run_dir, f"attempt_{restart}"), restart)
            if not self.failed or restart == self.plan.max_restarts:
                break
            fresh = self._restart(self.plan.max_restarts - restart)
            if fresh is None:
                break
            pipes, restart = fresh, restart + 1
        if self.failed:
            self._close(signal.SIGTERM)  # torchrun's _stop_workers
        self._end_tail()  # as torchrun's PContext.close: the ranks' lines before its report
        if self.failed:
            code = self._report()
        if joined is not None:
            if code == 0:
                joined.exit_barrier()
            if self.stopping is None:  # a signal leaves the rendezvous open, as torchrun's does
                joined.shutdown()
        del store
        close_fds([self.store_alive])
        return code

    def _attempt(self, pipes: list[int], place: Placement, attempt_dir: str, restart: int) -> int:
        """Hand each forked rank its environment, then watch them: 0 once all succeeded, 1 when
        a rank failed (``failed``; the others still run) or a signal stopped them."""
        envs = rank_envs(os.environ, self.plan, place, attempt_dir, restart)
        self.error_files = [env["TORCHELASTIC_ERROR_FILE"] for env in envs]
        for fd, env in zip(pipes, envs, strict=True):
            os.makedirs(os.path.dirname(env["TORCHELASTIC_ERROR_FILE"]), exist_ok=True)
            with contextlib.suppress(OSError), os.fdopen(fd, "wb") as pipe:  # a rank killed meanwhile
                pipe.write(json.dumps(env).encode())
        if self.tail_pipe >= 0:
            tee.start(self.tail_pipe, tee.tailed(self.plan.options, self.plan.role, envs))
        return self._watch()

    def _restart(self, left: int) -> list[int] | None:
        """Torchrun's restart of the group, ``left`` restarts left: the failed attempt's ranks
        are stopped, fresh ones are forked from this agent, which forked the first ones and has run
        nothing since (no thread: the store is served apart); their pipes. None when a signal came
        or it cannot fork safely."""
        if self.stopping is not None:
            return None
        if (count := threads()) > 1:
            print(f"disttrain warm agent: cannot fork a restart: {count} threads run here", file=sys.stderr)
            return None
        role, total = self.plan.role, self.plan.max_restarts
        print(
            f"[{role}] Worker group FAILED. {left}/{total} attempts left; will restart worker group",
            file=sys.stderr,
            flush=True,
        )
        self._close(signal.SIGTERM)  # torchrun's _stop_workers
        self._end_tail()
        self.pids, self.codes, self.failed = {}, {}, {}
        return self._fork_ranks()

    def _serve_apart(self, listener: socket.socket, pipes: list[int]) -> None:
        """Serve the store on ``listener`` from a forked process that ends with this agent."""
        from ...runtime.rendezvous import serve_store

        alive_r, self.store_alive = os.pipe()
        if os.fork() == 0:
            code = 1
            try:  # the ranks' pipes closed here, else a rank would wait for its environment forever
                close_fds([*pipes, self.store_alive, self.tail_pipe, self.conn.fileno()])
                store = serve_store(listener)
                while os.read(alive_r, 1):  # b"": the agent has ended
                    pass
                del store
                code = 0
            finally:
                os._exit(code)
        os.close(alive_r)
        listener.close()

    def _fork_ranks(self) -> list[int]:
        """Fork each rank, waiting for its environment on a pipe; the pipes' ends to write it to."""
        pipes: list[int] = []
        for local_rank in range(self.plan.nproc):
            read, write = os.pipe()
            gc.freeze()  # as the zygote does before it forks
            pid = os.fork()
            if pid == 0:
                close_fds([*pipes, write, self.conn.fileno(), self.store_alive])
                env = _await_env(read)
                tee.redirect_rank(self.plan.options, local_rank, self.plan.nproc, env)
                rank_main(env, self.plan.script, self.plan.args)  # never returns
            os.close(read)
            pipes.append(write)
            self.running[pid], self.pids[local_rank] = local_rank, pid
        if tee.tees_any(self.plan.options, self.plan.nproc):  # forked now: no thread runs yet
            self.tailer, self.tail_pipe = tee.fork_tailer([*pipes, self.conn.fileno(), self.store_alive])
        return pipes

    def _end_tail(self) -> None:
        """Tell the tailer the ranks have ended; wait while it copies what is left."""
        close_fds([self.tail_pipe])
        self.tail_pipe = -1
        if self.tailer is not None:
            with contextlib.suppress(ChildProcessError):  # reaped already
                os.waitpid(self.tailer, 0)
            self.tailer = None

    def _watch(self) -> int:
        with selectors.DefaultSelector() as sel:
            sel.register(self.conn, selectors.EVENT_READ)
            pidfds = [os.pidfd_open(pid) for pid in self.running]
            for fd in pidfds:  # a rank's end wakes the watch at once
                sel.register(fd, selectors.EVENT_READ)
            try:
                return self._watch_loop(sel)
            finally:
                close_fds(fd for fd in pidfds if fd in sel.get_map())

    def _watch_loop(self, sel: selectors.BaseSelector) -> int:
        while True:
            self._reap()
            if self.stopping is not None:
                print(f"Received {self.stopping.name} death signal, shutting down workers", file=sys.stderr)
                self._close(self.stopping)
                return 1  # torchrun's: the SignalException it raises ends it with 1
            if any(code != 0 for code in self.codes.values()):
                self.failed = {rank: code for rank, code in sorted(self.codes.items()) if code != 0}
                for rank, code in self.failed.items():  # torchrun's error line, as its PContext logs it
                    where = f"local_rank: {rank} (pid: {self.pids[rank]}) of binary: {sys.executable}"
                    print(f"failed (exitcode: {code}) {where}", file=sys.stderr, flush=True)
                return 1
            if len(self.codes) == self.plan.nproc:
                return 0
            for key, _ in sel.select(MONITOR_INTERVAL):
                if key.fileobj is not self.conn:
                    sel.unregister(key.fileobj)  # that rank ended: reaped above next time
                    os.close(key.fd)
                elif not self.conn.recv(1):
                    # The launcher is gone (a cold agent gets SIGTERM then: its parent-death signal).
                    self.stopping = signal.SIGTERM
                    sel.unregister(self.conn)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopping = signal.Signals(signum)

    def _reap(self) -> None:
        while self.running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if (local_rank := self.running.pop(pid, None)) is not None:
                self.codes[local_rank] = os.waitstatus_to_exitcode(status)
            elif pid == self.tailer:
                self.tailer = None

    def _close(self, sig: signal.Signals) -> None:
        """torchrun's ``PContext.close``: ``sig`` to every rank still running, SIGKILL after 30 s."""
        for pid in list(self.running):
            print(f"Sending process {pid} closing signal {sig.name}", file=sys.stderr, flush=True)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, sig)  # each rank leads its own session, as torchrun's do
        deadline = time.monotonic() + CLOSE_TIMEOUT
        while self.running and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.01)
        for pid in list(self.running):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        while self.running:
            self._reap()
            time.sleep(0.01)

    def _report(self) -> int:
        """The last attempt failed: torchrun's own failure report; exit 1."""
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

        failures = {
            rank: ProcessFailure(rank, self.pids[rank], code, self.error_files[rank])
            for rank, code in sorted(self.failed.items())
        }
        report = ChildFailedError(self.plan.script, failures).format_msg()
        print(f"{ChildFailedError.__module__}.ChildFailedError: \n{report}", file=sys.stderr)
        return 1


class _Stopped(BaseException):
    def __init__(self, sig: signal.Signals) -> None:
        self.signal = sig


def _raise_stopped(signum: int, frame: object) -> None:
    raise _Stopped(signal.Signals(signum))


# -- a rank ------------------------------------------------------------------------------------------
INTERPRETER: Interpreter | None = None  # set by the zygote once it has imported
MAX_ENV = 1 << 20  # bytes of a rank's environment sent down its pipe


def _await_env(fd: int) -> dict[str, str]:
    """A forked rank's environment from its agent; without one (the agents never met, the agent
    is gone, a signal came first) the rank ends here, having run nothing: never as the agent."""
    try:
        data = b""
        while len(data) <= MAX_ENV and (chunk := os.read(fd, 65536)):
            data += chunk
        env = json.loads(data)
        os.close(fd)
        return {str(k): str(v) for k, v in env.items()}
    except BaseException:  # EOF (b"" is no JSON), a KeyboardInterrupt, a cut-off or odd message
        os._exit(1)


def rank_main(env: dict[str, str], script: str, args: list[str]) -> None:
    """Run the script as a cold rank runs it (``python -u -m jupyter_disttrain.runtime.worker
    SCRIPT ARGS`` under torchrun), then end this process; never returns."""
    code = 1
    try:
        os.setsid()  # torchrun starts each rank in a session of its own
        _fresh_signals()
        become(env)
        _fresh_interpreter(env, script, args)
        from ...runtime import worker

        try:
            worker.main([script, *args])
            code = 0
        except SystemExit as exc:
            code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
        except KeyboardInterrupt:
            sys.excepthook(*sys.exc_info())
            _finalize()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)  # as Python ends on an uncaught KeyboardInterrupt
        except BaseException:
            sys.excepthook(*sys.exc_info())  # what Python prints before it exits with 1
        _finalize()
    finally:
        os._exit(code)


def _fresh_interpreter(env: Mapping[str, str], script: str, args: list[str]) -> None:
    """Undo what the fork inherited of the zygote's interpreter state (``fresh.restore``)."""
    if INTERPRETER is None:
        raise RuntimeError("the zygote did not record its interpreter")
    restore(INTERPRETER, env, [sys.executable, "-u", "-m", WORKER_MODULE, script, *args])


def _finalize() -> None:
    """What Python does at exit before it tears the interpreter down: join non-daemon threads,
    run atexit functions, flush the standard streams."""
    import atexit
    import threading

    with contextlib.suppress(Exception):
        threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
