"""The keeper of an allocation's warm steps: a process beside the kernel that holds one long-lived
``srun`` warm step per node (``warmstep.py``) and lets each job's launcher talk to that node's
zygote as it would to a local one.

``python -m jupyter_disttrain.backends.slurm.keeper SOCKET`` (a Slurm launcher starts it, detached,
the first time a job of its allocation and fingerprint runs warm; users never do). It listens on
``SOCKET``, a Unix socket (0600) in this user's runtime dir (0700) named for the allocation and the
fingerprint (``socket_path``). A launcher sends it the zygote's spawn request plus ``node`` and
``warm_step`` (that node's ``srun`` command line, used when the node has no warm step yet) and
reads the zygote's answers back on the same connection; later lines it sends are signals for its
agent (``{"op": "signal", "signal": SIG}``), and closing the connection stops the agent. Each
connection is one channel multiplexed over its node's ``srun`` stdin and stdout.

Three more requests, each answered on its connection and closed: ``{"op": "start", "node",
"warm_step"}`` (that node's warm step started without a job: ``%load_ext``), ``{"op": "status"}`` (its warm
steps: node, step, host, GPUs, the jobs running in each, idle since when, the idle time after which
each ends: ``jobs/pools.py`` lists them as a pool) and ``{"op": "release", "force", "drain"}``
(each step told to end: a keeper whose steps run a job refuses, naming the jobs, unless ``force``
(the jobs fail, ``WarmStepLost``) or ``drain`` (each step ends once its job has: how a keeper of
an older fingerprint is released once a new one serves, ``release_stale``)). A releasing keeper
forks no more jobs (they run cold).

It ends once its last warm step has ended (they end themselves when idle, or with the
allocation, or on release), and at once when none could start.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...runtime import contract
from ..warm.plan import WarmUnavailable, zygote_dir
from ..warm.zygote_protocol import MAX_REQUEST, answer, listen, peer_uid, read_request
from .pools import alive, release_stale

if TYPE_CHECKING:
    import psutil

KEEPER_MODULE = "jupyter_disttrain.backends.slurm.keeper"
REQUEST_TIMEOUT = 10.0  # seconds a launcher may take to send its request
MAX_SOCKET_PATH = 107


def socket_path(allocation: str, fingerprint: str) -> Path:
    """Where the keeper of ``allocation``'s warm steps for ``fingerprint`` listens; WarmUnavailable
    when this user has no private runtime dir, or it is too long a path for a socket."""
    path = zygote_dir() / f"slurm-{allocation}-{fingerprint}.sock"
    if len(str(path).encode()) > MAX_SOCKET_PATH:
        raise WarmUnavailable(f"{path} is too long a path for a Unix socket")
    return path


def ensure(path: Path, env: Mapping[str, str], env_key: str = "") -> None:
    """Start the keeper of ``path`` unless one lives: detached (a session of its own: it outlives
    the job whose launcher started it), with ``env`` less the job's own variables; its output
    goes to a log beside its socket. ``env_key``: the environment its fingerprint is of."""
    if alive(path):
        return
    own = {k: v for k, v in env.items() if k not in (contract.JOB_ID_ENV, contract.JOB_DIR_ENV)}
    with open(path.with_suffix(".log"), "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", KEEPER_MODULE, str(path), *([env_key] if env_key else [])],
            env=own,
            cwd=str(path.parent),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def serves_others(proc: psutil.Process, job_id: str) -> bool:
    """Whether ``proc``, a descendant of a Slurm launcher, is a keeper that launcher started, or
    its ``srun``: they serve the next jobs (the launcher's sweep spares them)."""
    import psutil

    try:
        return any(KEEPER_MODULE in p.cmdline() for p in [proc, *proc.parents()])
    except psutil.Error:
        return False


class _Step:
    """One node's warm step: its ``srun``, the frames read from it so far, its channels."""

    def __init__(self, argv: Sequence[str], log: Path) -> None:
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, bufsize=0
            )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.buffer = b""
        self.channels: set[int] = set()
        self.name = "of node"  # JOB.STEP on NODE, once the step said so
        self.hello: dict[str, Any] = {}  # what the step said of itself (step, node, GPUs, idle)
        self.jobs: dict[int, str] = {}  # channel -> the id of the job forked in it
        self.idle_since: float | None = time.time()  # None while a job runs in it
        self.released = False

    def end(self) -> None:
        """Tell the step to end: its stdin closes, as when this keeper goes (its agents are stopped)."""
        self.released = True
        with contextlib.suppress(OSError):
            self.stdin.close()

    def status(self, node: int) -> dict[str, Any]:
        jobs = sorted(set(self.jobs.values()))
        hello = self.hello
        return {"node": node, **hello, "jobs": jobs, "idle_since": None if self.channels else self.idle_since}

    def send(self, frame: dict[str, Any]) -> bool:
        data = memoryview(json.dumps(frame).encode() + b"\n")
        try:
            while data:
                data = data[os.write(self.stdin.fileno(), data) :]
            return True
        except (OSError, ValueError):
            return False


class Keeper:
    def __init__(self, path: Path, env_key: str = "") -> None:
        self.path = path
        self.env_key = env_key  # the environment it serves: an older fingerprint of it is stale
        self.releasing: dict[str, bool] | None = None  # how it was told to release, once it was
        self.sel = selectors.DefaultSelector()
        self.steps: dict[int, _Step] = {}  # node -> its warm step
        self.conns: dict[int, tuple[socket.socket, int]] = {}  # channel -> (launcher, node)
        self.next_channel = 0
        self.new_step: set[int] = set()  # channels whose request started their node's step
        self.listener: socket.socket | None = None
        self.stale_released = False

    def serve(self) -> int:
        self.listener = listen(self.path)
        self.sel.register(self.listener, selectors.EVENT_READ, self._accept)
        try:
            # Serves while a step lives; one launcher at least is on its way when it starts.
            while self.steps or self.next_channel == 0 or self.conns:
                events = self.sel.select(timeout=REQUEST_TIMEOUT * 3)
                if not events and not self.steps:
                    return 0  # started, and no request came
                for key, _ in events:
                    key.data(key)
        finally:
            with contextlib.suppress(OSError):
                self.path.unlink()
            self.listener.close()
        return 0

    def _accept(self, key: selectors.SelectorKey) -> None:
        conn, _ = key.fileobj.accept()  # type: ignore[union-attr]
        if peer_uid(conn) != os.getuid():
            conn.close()
            return
        conn.settimeout(REQUEST_TIMEOUT)
        try:
            request = read_request(conn)
        except (OSError, ValueError) as exc:
            answer(conn, {"ok": False, "error": f"not a request: {exc}"})
            conn.close()
            return
        ops = {"status": self._status, "release": self._release, "start": self._start_ahead}
        if request.get("op") in ops:
            answer(conn, ops[request["op"]](request))
            conn.close()
            return
        self._spawn(conn, request)

    def _start_ahead(self, request: dict[str, Any]) -> dict[str, Any]:
        """A node's warm step started before any job needs it (``%load_ext``: the first job forks too)."""
        try:
            if self.releasing is not None:
                raise ValueError("its warm steps are being released")
            node = int(request["node"])
            if node not in self.steps:
                self._start(node, request["warm_step"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return {"ok": False, "error": f"no warm step started: {exc}"}
        return {"ok": True}

    def _status(self, request: dict[str, Any]) -> dict[str, Any]:
        steps = [step.status(node) for node, step in sorted(self.steps.items())]
        return {"ok": True, "env_key": self.env_key, "releasing": self.releasing is not None, "steps": steps}

    def _release(self, request: dict[str, Any]) -> dict[str, Any]:
        """End each warm step now; one that runs a job only when forced (its job fails) or, when
        draining, once its job has ended (``_drop``)."""
        force, drain = bool(request.get("force")), bool(request.get("drain"))
        busy = sorted({job for step in self.steps.values() for job in step.jobs.values()})
        if busy and not force and not drain:
            return {"ok": False, "busy": busy}
        self.releasing = {"force": force, "drain": drain}
        for step in self.steps.values():
            if force or not step.channels:
                step.end()
        return {"ok": True, "busy": busy}

    def _spawn(self, conn: socket.socket, request: dict[str, Any]) -> None:
        try:
            if self.releasing is not None:
                raise ValueError("its warm steps are being released")
            node, argv = int(request["node"]), request.pop("warm_step")
            new = node not in self.steps
            step = self.steps.get(node) or self._start(node, argv)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            answer(conn, {"ok": False, "error": f"the warm step could not take it: {exc}"})
            conn.close()
            return
        channel = self.next_channel = self.next_channel + 1
        if not step.send({"c": channel, "m": request}):
            answer(conn, {"ok": False, "error": "the warm step has ended"})
            conn.close()
            return
        step.channels.add(channel)
        step.idle_since = None
        with contextlib.suppress(AttributeError, TypeError):
            step.jobs[channel] = str(request["env"].get(contract.JOB_ID_ENV) or "?")
        self.conns[channel] = (conn, node)
        if new:  # its launcher says so: this job started a step, the next ones will not
            self.new_step.add(channel)
        conn.setblocking(False)
        self.sel.register(conn, selectors.EVENT_READ, lambda k, c=channel: self._from_launcher(c))

    def _start(self, node: int, argv: object) -> _Step:
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv) or not argv:
            raise ValueError("no warm step command line")
        step = _Step(argv, self.path.with_suffix(".log"))
        self.steps[node] = step
        self.sel.register(step.stdout, selectors.EVENT_READ, lambda k, n=node: self._from_step(n))
        return step

    def _from_launcher(self, channel: int) -> None:
        conn, node = self.conns[channel]
        step = self.steps.get(node)
        try:
            data = conn.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the launcher has gone: its agent stops, as a local warm agent's does
            if step is not None:
                step.send({"c": channel, "close": True})
            self._drop(channel)
            return
        for line in data.splitlines():
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                message = json.loads(line)
                if message.get("op") == "signal" and step is not None:
                    step.send({"c": channel, "signal": int(message["signal"])})

    def _from_step(self, node: int) -> None:
        step = self.steps[node]
        chunk = os.read(step.stdout.fileno(), 65536)
        if not chunk:  # the step ended (idle, scancel, the allocation's end, its node lost)
            self.sel.unregister(step.stdout)
            lost = f"the warm step {step.name} ended while the job ran (scancel, the allocation's end, its"
            lost += " node lost): its agent and ranks went with it; a re-run starts a new one"
            for channel in list(step.channels):
                self._to_launcher(step, channel, {"exit": -signal.SIGKILL, "lost": lost})
            step.proc.wait()
            del self.steps[node]
            return
        step.buffer += chunk
        while b"\n" in step.buffer:
            line, _, step.buffer = step.buffer.partition(b"\n")
            try:
                frame = json.loads(line)
                channel, message = int(frame["c"]), frame["m"]
            except (ValueError, KeyError, TypeError):
                print(f"keeper: not a frame: {line[:80]!r}", flush=True)
                continue
            if isinstance(message, dict):
                self._to_launcher(step, channel, message)
        if len(step.buffer) > MAX_REQUEST:
            step.buffer = b""

    def _to_launcher(self, step: _Step, channel: int, message: dict[str, Any]) -> None:
        if isinstance(message.get("hello"), dict):  # the step says which it is
            step.hello = {k: message["hello"].get(k) for k in ("step", "host", "gpus", "idle")}
            step.name = f"{message['hello'].get('step')} on {message['hello'].get('node')}"
            self._serves()
            return
        if channel not in self.conns:
            return
        conn, _ = self.conns[channel]
        if message.get("ok") and channel in self.new_step:
            message = {**message, "new_step": True}
        if "exit" in message and step.released and "lost" not in message:  # its agent was stopped for it
            lost = f"the warm step {step.name} was released by force while the job ran: its agent and ranks"
            message = {**message, "lost": lost + " were stopped"}
        try:
            conn.setblocking(True)
            conn.sendall(json.dumps(message).encode() + b"\n")
            conn.setblocking(False)
        except OSError:
            self._drop(channel)
            return
        if "exit" in message or message.get("ok") is False:
            self._drop(channel)

    def _drop(self, channel: int) -> None:
        self.new_step.discard(channel)
        conn, node = self.conns.pop(channel)
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(conn)
        conn.close()
        step = self.steps.get(node)
        if step is None:
            return
        step.channels.discard(channel)
        step.jobs.pop(channel, None)
        if not step.channels:
            step.idle_since = time.time()
            if self.releasing is not None:  # a draining release: the step's last job has ended
                step.end()

    def _serves(self) -> None:
        """Once a step of this keeper serves, an older fingerprint's keeper of the same allocation
        and environment (one from before a ``pip install``) is released as its jobs end."""
        if self.env_key and not self.stale_released:
            self.stale_released = True
            release_stale(self.path, self.env_key)


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python -m jupyter_disttrain.backends.slurm.keeper SOCKET [ENV_KEY]", file=sys.stderr)
        return 2
    path = Path(argv[0])
    lock = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another keeper serves
    return Keeper(path, argv[1] if len(argv) > 1 else "").serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
