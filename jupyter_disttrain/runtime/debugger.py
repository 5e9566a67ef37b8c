"""``breakpoint()``, ``pdb.set_trace()`` and ``--pdb`` in a rank: a pdb prompt the notebook answers.

A rank has no terminal. Here its pdb talks through a Unix socket in the job dir,
``debug/<replica>.sock`` (0600), one exchange per connection (``debugrelay.py``): pdb's output
is kept until pdb asks for its next command, then sent as the answer to whoever sent the last
one; the next connection's line is that command. The rank says in its log when it stops and
when it goes on (``STOPPED``/``LEFT``: the front ends open and close their prompt on these lines),
and goes on by itself (``continue``) once no one has answered for ``DEBUG_TIMEOUT_ENV`` seconds
(default ``DEFAULT_TIMEOUT``): a notebook that went away never leaves a job hanging.

``q`` (quit) is the job layer's to carry out: it cancels the whole job (the job ends Cancelled,
every process stopped); the rank answers, then waits to be stopped.

While one rank is at the prompt its peers wait in their next collective. That collective's
timeout is the process group's, fixed when the group was made (gloo's default is 30 minutes,
NCCL's 10), and it cannot be lengthened for a collective already waiting; so in a job that can
stop here (its script calls ``breakpoint()`` or ``set_trace()``, or ``--pdb``) groups made
without a ``timeout=`` get ``GROUP_TIMEOUT`` instead. ``PYTHONBREAKPOINT=0`` still turns
``breakpoint()`` off, and another ``PYTHONBREAKPOINT`` hook is called as Python would.

Standard library only until a prompt opens (``pdb`` is imported then, or when the script does).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from datetime import timedelta
from typing import Any

from . import contract
from .debugrelay import MAX_ANSWER, MAX_REQUEST, short_path
from .importhook import after_import

DEFAULT_TIMEOUT = 600.0  # specs.DEBUG_TIMEOUT: --debug-timeout's default
GROUP_TIMEOUT = timedelta(hours=24)
QUIT_WAIT = 30.0  # after ``q``: how long the rank waits for the cancel before it ends itself
# The lines the front ends watch for (``jobs/debug.py`` reads them with the same words).
STOPPED = "[disttrain] {replica} waits in the debugger at {where}"
LEFT = "[disttrain] {replica} left the debugger"
PROMPT = "(Pdb) "
_LEAVE = ("c", "cont", "continue")
_QUIT = ("q", "quit", "exit")
_lock = threading.Lock()  # one prompt per rank at a time


def install(replica: str, job_dir: str, source: bytes) -> None:
    """Route ``breakpoint()`` and ``pdb.set_trace()`` to the notebook's prompt; in a job that
    can stop there, make process groups that wait for it."""
    sys.breakpointhook = _hook
    after_import("pdb", _route_set_trace)
    _where[:] = [replica, job_dir]
    if b"breakpoint(" in source or b"set_trace(" in source or os.environ.get(contract.PDB_ENV):
        after_import("torch.distributed.distributed_c10d", _long_group_timeouts)


_where: list[str] = []  # [replica, job dir]


def _hook(*args: Any, **kwargs: Any) -> Any:
    """``sys.breakpointhook``: Python's rules for ``PYTHONBREAKPOINT`` (read at each call), else
    the notebook's prompt."""
    chosen = os.environ.get("PYTHONBREAKPOINT", "")
    if chosen == "0":
        return None
    if chosen and chosen != "pdb.set_trace":
        return sys.__breakpointhook__(*args, **kwargs)
    return set_trace(sys._getframe(1), header=kwargs.get("header"))


def _route_set_trace(pdb_module: Any) -> None:
    def routed(*, header: str | None = None) -> None:
        set_trace(sys._getframe(1), header=header)

    pdb_module.set_trace = routed


def _long_group_timeouts(c10d: Any) -> None:
    """Groups made without a timeout wait ``GROUP_TIMEOUT`` for a peer (``_get_default_timeout``
    reads these two names at each call)."""
    c10d.default_pg_timeout = GROUP_TIMEOUT
    if isinstance(getattr(c10d, "default_pg_nccl_timeout", None), timedelta):
        c10d.default_pg_nccl_timeout = GROUP_TIMEOUT


def set_trace(frame: Any, header: str | None = None) -> None:
    """Stop in ``frame`` at its next line, with the prompt in the notebook."""
    debugger = _debugger()
    if debugger is None:
        return
    if header:
        debugger.channel.write(header + "\n")
    debugger.set_trace(frame)


def post_mortem(exc: BaseException) -> None:
    """``--pdb``: the first rank of the job to fail opens a prompt in the frame that raised (the
    others fail as they would). Returns when the prompt ends."""
    if not isinstance(exc, Exception) or type(exc).__name__ == "BdbQuit":  # a stop, not a failure
        return
    if not os.environ.get(contract.PDB_ENV) or not _where or not _first_to_fail(_where[1]):
        return
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename.endswith("worker.py"):
        tb = tb.tb_next  # from the script's first frame, as the printed traceback
    debugger = _debugger()
    if debugger is None or tb is None:
        return
    debugger.channel.write(f"post-mortem: {type(exc).__name__}: {exc}\n")
    debugger.reset()
    debugger.interaction(None, tb)


def _first_to_fail(job_dir: str) -> bool:
    folder = os.path.join(job_dir, contract.DEBUG_DIR)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.close(os.open(os.path.join(folder, "post-mortem"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError:
        return False
    return True


def _debugger() -> Any:
    if not _where:
        return None
    replica, job_dir = _where
    timeout = _timeout()
    path = os.path.join(job_dir, contract.DEBUG_DIR, contract.debug_socket(replica))
    return _make_pdb()(Channel(path, replica, timeout))


def _timeout() -> float:
    try:
        return max(1.0, float(os.environ.get(contract.DEBUG_TIMEOUT_ENV) or DEFAULT_TIMEOUT))
    except ValueError:
        return DEFAULT_TIMEOUT


def _make_pdb() -> type:
    import pdb

    class NotebookPdb(pdb.Pdb):
        """pdb on a ``Channel``; says in the log when it stops and when it goes on."""

        def __init__(self, channel: Channel) -> None:
            super().__init__(stdin=channel, stdout=channel, nosigint=True, readrc=False)  # type: ignore[arg-type]
            self.channel = channel
            self.prompt = PROMPT

        def interaction(self, frame: Any, tb: Any) -> None:
            with _lock:
                self.channel.open(_location(frame, tb))
                try:
                    super().interaction(frame, tb)
                finally:
                    if self.channel.leaving or frame is None:  # continue, or a post-mortem's end
                        self.channel.close()

        def do_continue(self, arg: str) -> Any:
            self.channel.leaving = True
            return super().do_continue(arg)

        do_c = do_cont = do_continue

    return NotebookPdb


def _location(frame: Any, tb: Any) -> str:
    if frame is None and tb is not None:
        while tb.tb_next is not None:
            tb = tb.tb_next
        frame = tb.tb_frame
    if frame is None:
        return "?"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


class Channel:
    """pdb's stdin and stdout over the rank's socket (see the module's docstring)."""

    def __init__(self, path: str, replica: str, timeout: float) -> None:
        self.path = path
        self.replica = replica
        self.timeout = timeout
        self.leaving = False
        self._listener: socket.socket | None = None
        self._pending: socket.socket | None = None  # sent the last command; waits for its answer
        self._out: list[str] = []  # pdb's output since the last answer
        self._last = ""  # the last answer, for a client that only looks

    # -- what pdb calls ------------------------------------------------------------------------
    def write(self, text: str) -> int:
        if sum(map(len, self._out)) < MAX_ANSWER:
            self._out.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def readline(self) -> str:
        """pdb's next command: the output so far answers the last one; then wait for a line."""
        self._answer(open_=True)
        line = self._next_line()
        if line is None:
            _say(f"[disttrain] {self.replica}: no answer for {self.timeout:.0f} s; it goes on")
            self.leaving = True
            return "continue\n"
        return line + "\n"

    # -- the session ---------------------------------------------------------------------------
    def open(self, where: str) -> None:
        if self._listener is not None:
            return
        self.leaving = False
        folder = os.path.dirname(self.path)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if os.path.lexists(self.path):
            os.unlink(self.path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Bound under another name, renamed once it listens: the socket's name says it answers.
        bound = os.path.join(folder, f".{os.path.basename(self.path)}.{os.getpid()}")
        old = os.umask(0o177)  # the socket is made 0600: only the job's user may talk to pdb
        try:
            with short_path(bound) as short:
                listener.bind(short)
        finally:
            os.umask(old)
        listener.listen(4)
        os.replace(bound, self.path)
        self._listener = listener
        _say(
            STOPPED.format(replica=self.replica, where=where)
            + f" (it goes on after {self.timeout:.0f} s without an answer)"
        )
        _extend_own_timeouts()

    def close(self) -> None:
        """The prompt ended: answer the last command (``open`` false), remove the socket."""
        self._answer(open_=False)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            _say(LEFT.format(replica=self.replica))

    def _answer(self, *, open_: bool, quit_: bool = False) -> None:
        conn, self._pending = self._pending, None
        if conn is None:
            return
        text = "".join(self._out)
        if _send(conn, {"output": text, "open": open_, "quit": quit_}):
            self._out.clear()
            self._last = text

    def _next_line(self) -> str | None:
        """The next command sent, answering those who only look; None when no one sent one
        within the timeout."""
        assert self._listener is not None
        deadline = time.monotonic() + self.timeout
        while (left := deadline - time.monotonic()) > 0:
            self._listener.settimeout(left)
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                return None
            request = _request(conn)
            line = request.get("line")
            if not isinstance(line, str):  # a look: what pdb said, the prompt still open
                text = "".join(self._out) or self._last
                if _send(conn, {"output": text, "open": True, "quit": False}):
                    self._out.clear()
                    self._last = text
                continue
            line = line.split("\n", 1)[0]
            if line.strip() in _QUIT:
                self._pending = conn
                self._answer(open_=False, quit_=True)
                _say(f"[disttrain] {self.replica}: quit in the debugger; the job is being cancelled")
                time.sleep(QUIT_WAIT)  # the job layer cancels the job, which stops this process
                return "quit"
            self._pending = conn
            return line
        return None


def _request(conn: socket.socket) -> dict[str, Any]:
    conn.settimeout(10)
    data = b""
    try:
        while not data.endswith(b"\n") and len(data) <= MAX_REQUEST:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        request = json.loads(data.decode("utf-8", "replace") or "{}")
    except (OSError, ValueError):
        return {}
    return request if isinstance(request, dict) else {}


def _send(conn: socket.socket, answer: dict[str, Any]) -> bool:
    try:
        conn.sendall(json.dumps(answer).encode())
        return True
    except OSError:  # the client gave up waiting: the output stays for the next exchange
        return False
    finally:
        conn.close()


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _extend_own_timeouts() -> None:
    """This rank's own groups (one made with a ``timeout=``) wait as long as its peers'."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is None:
        return
    try:
        if c10d.is_initialized():
            for group in list(getattr(c10d, "_pg_map", {})):
                c10d._set_pg_timeout(GROUP_TIMEOUT, group)
    except Exception:  # a torch without it, or a group of another backend: the peers' matter more
        pass
