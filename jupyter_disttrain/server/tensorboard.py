"""TensorBoard processes on demand: one per job, one over all jobs, supervised and private.

Each instance is a ``simpervisor.SupervisedProcess`` (restarted if it dies) serving on a Unix
socket in a directory only the server's user can enter (0700), through ``tb_serve.py``:
TensorBoard has no authentication, and a TCP port, even on 127.0.0.1, is open to every local
user, so the authenticated proxy is the only way in. For the same reason TensorBoard's
Rust data server (a gRPC port on localhost) is off (``--load_fast=false``). ``--path_prefix``
is the URL the proxy serves it under, ``--reload_interval`` is small and every event file
of a run is followed (``--reload_multifile``), so new points of every writer show up within
a couple of seconds. An instance is stopped after ``idle_timeout`` seconds without a proxied
request, and all at shutdown.
"""

from __future__ import annotations

import asyncio
import atexit
import builtins
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import quote, unquote

from jupyter_server.utils import url_path_join

from ..model.errors import BackendError, InvalidSpecError, UnknownJobError
from ..model.specs import validate_job_id
from ..payloads.runs import ALL_JOBS, TensorBoardInfo

if TYPE_CHECKING:
    from simpervisor import SupervisedProcess

    from ..storage.store import JobStore

PROXY_PREFIX = "disttrain/tensorboard"
UPSTREAM_HOST = "localhost"  # a name only: requests go to the instance's Unix socket
TB_SERVE = Path(__file__).with_name("tb_serve.py")
# Flags the manager sets itself: a configured command must not move TensorBoard elsewhere.
RESERVED_FLAGS = (
    "--host",
    "--bind_all",
    "--port",
    "--path_prefix",
    "--logdir",
    "--logdir_spec",
    "--load_fast",
    "--grpc_data_provider",
    "--reload_interval",
    "--reload_multifile",
    "--reload_multifile_inactive_secs",
)


def check_command(command: list[str]) -> list[str]:
    """Raise if ``command`` is empty or sets a flag the manager owns (where it serves, what it reads)."""
    if not command:
        raise InvalidSpecError(
            "tensorboard_command is empty; give a Python that has TensorBoard, e.g. [sys.executable]"
        )
    for arg in command[1:]:
        if arg.split("=", 1)[0] in RESERVED_FLAGS:
            raise InvalidSpecError(
                f"tensorboard_command must not set {arg.split('=', 1)[0]}: the manager serves TensorBoard "
                "on a private Unix socket and sets the prefix, log dir and reload flags itself"
            )
    return command


@dataclass
class TensorBoardInstance:
    """One supervised TensorBoard and what the proxy needs to reach it."""

    tb_id: str
    logdir: Path
    socket_path: Path
    prefix: str
    process: SupervisedProcess
    log_path: Path
    log_file: BinaryIO
    started: float = field(default_factory=time.time)
    last_activity: float = field(default_factory=time.monotonic)

    @property
    def running(self) -> bool:
        return bool(self.process.running)


class TensorBoardManager:
    """Starts, supervises, proxies to and stops TensorBoard processes.

    Args:
        store: The job store; job ``X`` shows ``<job_dir>/tensorboard``, ``_all`` the job root.
        command: How to run TensorBoard, without the flags the manager sets.
        base_url: The Jupyter server's base URL (the proxy prefix starts with it).
        reload_interval: Seconds between TensorBoard's scans for new event data.
        multifile_inactive_secs: Follow every event file of a run written to within this many
            seconds (``--reload_multifile_inactive_secs``); 0 follows only the newest file.
        idle_timeout: Stop an instance after this many seconds without requests (0: never).
        ready_timeout: Seconds to wait for a new instance to answer before giving up.
    """

    def __init__(
        self,
        store: JobStore,
        command: list[str],
        base_url: str,
        reload_interval: float = 1.0,
        multifile_inactive_secs: int = 86400,
        idle_timeout: float = 1800.0,
        ready_timeout: float = 60.0,
        log: logging.Logger | None = None,
    ) -> None:
        self.store = store
        self.command = check_command(list(command))
        self.base_url = base_url
        self.reload_interval = reload_interval
        self.multifile_inactive_secs = multifile_inactive_secs
        self.idle_timeout = idle_timeout
        self.ready_timeout = ready_timeout
        self.log = log or logging.getLogger(__name__)
        self._instances: dict[str, TensorBoardInstance] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._log_dir: Path | None = None  # 0700: TensorBoards' output and sockets, made on first start
        self._started = 0  # names the sockets (a job id could overflow a socket path's 108 bytes)

    # -- naming ----------------------------------------------------------------------------------
    def logdir(self, tb_id: str) -> Path:
        """The directory TensorBoard ``tb_id`` reads; raises for bad ids and unknown jobs."""
        if tb_id == ALL_JOBS:
            self.store.make_root()
            return self.store.root
        try:
            validate_job_id(tb_id)
        except InvalidSpecError:
            raise InvalidSpecError(f"{tb_id!r} is neither a job id nor {ALL_JOBS!r} (all jobs)") from None
        self.store.existing_dir(tb_id)
        path = self.store.tensorboard_dir(tb_id)
        path.mkdir(exist_ok=True)
        return path

    def prefix(self, tb_id: str) -> str:
        """URL path TensorBoard ``tb_id`` is served under (no trailing slash)."""
        return url_path_join(self.base_url, PROXY_PREFIX, tb_id)

    def server_prefix(self, tb_id: str) -> str:
        """The same path decoded, as TensorBoard compares it (``base_url`` may be %-encoded)."""
        return unquote(self.prefix(tb_id))

    def info(self, tb_id: str) -> TensorBoardInfo:
        """What the UI needs: the URL to open and whether it runs now."""
        logdir = self.logdir(tb_id)
        inst = self._instances.get(tb_id)
        running = bool(inst and inst.running)
        return TensorBoardInfo(
            id=tb_id,
            url=self.prefix(tb_id) + "/",
            logdir=str(logdir),
            running=running,
            pid=inst.process.pid if inst and running else None,
            started=inst.started if inst else None,
            reload_interval=self.reload_interval,
        )

    def list(self) -> list[TensorBoardInfo]:
        out = []
        for tb_id in sorted(self._instances):
            with contextlib.suppress(InvalidSpecError, UnknownJobError):
                out.append(self.info(tb_id))
        return out

    def touch(self, tb_id: str) -> None:
        inst = self._instances.get(tb_id)
        if inst is not None:
            inst.last_activity = time.monotonic()

    # -- lifecycle -------------------------------------------------------------------------------
    async def ensure(self, tb_id: str) -> TensorBoardInstance:
        """The running instance for ``tb_id``, started and waited for if needed."""
        logdir = self.logdir(tb_id)
        async with self._lock(tb_id):
            inst = self._instances.get(tb_id)
            if inst is not None and inst.running:
                inst.last_activity = time.monotonic()
                return inst
            if inst is not None:  # it was stopped or gave up restarting: start afresh
                await self._stop_instance(inst)
            inst = await self._start(tb_id, logdir)
            self._instances[tb_id] = inst
            self._start_reaper()
            return inst

    async def reload(self, tb_id: str) -> TensorBoardInstance:
        """Restart ``tb_id`` so it reads every event file on disk now, and wait until it serves."""
        self.logdir(tb_id)
        async with self._lock(tb_id):
            inst = self._instances.pop(tb_id, None)
            if inst is not None:
                await self._stop_instance(inst)
        return await self.ensure(tb_id)

    async def stop(self, tb_id: str, must_exist: bool = False) -> None:
        """Stop ``tb_id`` if it runs; with ``must_exist``, an id that is neither running nor
        a job in the store raises ``UnknownJobError`` (the REST API's 404)."""
        if tb_id != ALL_JOBS:
            validate_job_id(tb_id)
            if must_exist and tb_id not in self._instances:
                self.store.existing_dir(tb_id)
        async with self._lock(tb_id):
            inst = self._instances.get(tb_id)
            if inst is not None:
                await self._stop_instance(inst)  # listed as running until it has exited
                self._instances.pop(tb_id, None)

    async def stop_all(self) -> None:
        """Stop every instance (server shutdown)."""
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        for tb_id in list(self._instances):
            await self.stop(tb_id)
        self._remove_log_dir()

    def flags(self, tb_id: str, logdir: Path, socket_path: Path) -> builtins.list[str]:
        """The arguments the manager gives ``tb_serve.py``: where to serve, what and how to read."""
        inactive = self.multifile_inactive_secs
        return [
            str(socket_path),
            "--logdir",
            str(logdir),
            "--path_prefix",
            self.server_prefix(tb_id),
            "--load_fast=false",  # the Rust data server would listen on a TCP port
            "--reload_interval",
            str(max(1, round(self.reload_interval))),
            f"--reload_multifile={'true' if inactive != 0 else 'false'}",
            "--reload_multifile_inactive_secs",
            str(inactive),
        ]

    async def _start(self, tb_id: str, logdir: Path) -> TensorBoardInstance:
        from simpervisor import SupervisedProcess

        if self._log_dir is None:
            self._log_dir = Path(tempfile.mkdtemp(prefix="disttrain-tensorboard-"))  # mode 0700
            atexit.register(self._remove_log_dir)  # a server that exits without stop_all
        self._started += 1
        socket_path = self._log_dir / f"{self._started}.sock"
        prefix = self.server_prefix(tb_id)
        python, *extra = self.command
        argv = [
            # Through tb_exec, so that TensorBoard ends even if the server is killed outright.
            sys.executable,
            "-m",
            "jupyter_disttrain.server.tb_exec",
            str(os.getpid()),
            python,
            str(TB_SERVE),
            *self.flags(tb_id, logdir, socket_path),
            *extra,
        ]
        log_path = self._log_dir / f"{tb_id}.log"
        # Open as long as the instance lives: a restart after a crash writes to it again.
        log_file = open(log_path, "ab")  # noqa: SIM115 -- closed by _stop_instance
        probe = f"http://{UPSTREAM_HOST}{quote(prefix)}/data/plugins_listing"

        pids: set[int] = set()

        async def ready(proc: Any) -> bool:
            # The supervisor restarts a process that exits, so a command that cannot run
            # shows up as ever new pids: give up after a few instead of waiting for the timeout.
            if proc.running and proc.pid is not None:
                pids.add(proc.pid)
            if len(pids) > 3:
                raise BackendError(
                    f"TensorBoard for {tb_id} keeps exiting at start; its output: {_tail(log_path)}"
                )
            return await _answers(probe, socket_path)

        process = SupervisedProcess(
            f"tensorboard-{tb_id}",
            *argv,
            always_restart=True,  # TensorBoard never exits on its own: any exit is a crash
            ready_func=ready,
            ready_timeout=self.ready_timeout,
            log=self.log,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
        )
        inst = TensorBoardInstance(tb_id, logdir, socket_path, prefix, process, log_path, log_file)
        self.log.info("starting TensorBoard %s on %s for %s", tb_id, socket_path, logdir)
        try:
            with _server_signal_handlers_kept():
                await process.start()
            is_ready = await process.ready()
        except OSError as exc:
            log_file.close()
            raise BackendError(f"could not start TensorBoard ({' '.join(self.command)}): {exc}") from exc
        except BackendError:
            await self._stop_instance(inst)
            raise
        if not is_ready:
            await self._stop_instance(inst)
            raise BackendError(
                f"TensorBoard for {tb_id} did not answer within {self.ready_timeout:.0f} s; "
                f"its output ends with: {_tail(log_path)}"
            )
        return inst

    async def _stop_instance(self, inst: TensorBoardInstance) -> None:
        from simpervisor import KilledProcessError

        if inst.process.proc is not None:
            with contextlib.suppress(KilledProcessError, ProcessLookupError):
                try:
                    await asyncio.wait_for(inst.process.terminate(), timeout=10)
                except asyncio.TimeoutError:
                    await inst.process.kill()
        inst.log_file.close()
        inst.socket_path.unlink(missing_ok=True)
        self.log.info("stopped TensorBoard %s", inst.tb_id)

    def _remove_log_dir(self) -> None:
        atexit.unregister(self._remove_log_dir)
        if self._log_dir is not None:
            shutil.rmtree(self._log_dir, ignore_errors=True)
            self._log_dir = None

    def _lock(self, tb_id: str) -> asyncio.Lock:
        return self._locks.setdefault(tb_id, asyncio.Lock())

    def _start_reaper(self) -> None:
        if self.idle_timeout > 0 and (self._reaper is None or self._reaper.done()):
            self._reaper = asyncio.ensure_future(self._reap_idle())

    async def _reap_idle(self) -> None:
        while self._instances:
            await asyncio.sleep(min(self.idle_timeout / 4, 30.0))
            now = time.monotonic()
            for tb_id, inst in list(self._instances.items()):
                if now - inst.last_activity > self.idle_timeout:
                    self.log.info("TensorBoard %s idle for %.0f s: stopping it", tb_id, self.idle_timeout)
                    await self.stop(tb_id)


@contextlib.contextmanager
def _server_signal_handlers_kept() -> Iterator[None]:
    """simpervisor's first start replaces the SIGINT and SIGTERM handlers with one that signals
    its processes and calls ``sys.exit(0)``: Jupyter's own shutdown (kernels, extensions, this
    manager's ``stop_all``) would never run and the socket dir would stay in the temp dir. The
    server's handlers are put back; ``stop_all`` stops the instances, tb_exec if the server dies."""
    if threading.current_thread() is not threading.main_thread():  # signal.signal is main-only
        yield
        return
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in kept.items():
            if handler is not None:
                signal.signal(sig, handler)


def unix_client(socket_path: Path) -> Any:
    """An HTTP client whose every request goes to ``socket_path`` (the URL's host is a name only)."""
    from jupyter_server_proxy.unixsock import UnixResolver
    from tornado.simple_httpclient import SimpleAsyncHTTPClient

    return SimpleAsyncHTTPClient(force_instance=True, resolver=UnixResolver(str(socket_path)))


async def _answers(url: str, socket_path: Path) -> bool:
    from tornado.httpclient import HTTPClientError

    if not socket_path.exists():
        return False
    client = unix_client(socket_path)
    try:
        response = await client.fetch(url, request_timeout=2.0, connect_timeout=1.0)
    except (HTTPClientError, OSError, asyncio.TimeoutError):
        return False
    finally:
        client.close()
    return response.code == 200


def _tail(path: Path, size: int = 600) -> str:
    try:
        data = path.read_bytes()[-size:]
    except OSError:
        return "(no output)"
    return data.decode("utf-8", "replace").strip().replace("\n", " | ") or "(no output)"
