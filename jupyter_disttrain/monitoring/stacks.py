"""The Python stacks of every thread of a running rank on this machine: "which rank is stuck?".

``py-spy dump`` reads them from outside, needing nothing of the rank, but it needs ptrace
permission over it (Yama's ``ptrace_scope``, a container without ``CAP_SYS_PTRACE``). Otherwise
the rank wrapper's ``faulthandler``, registered on ``contract.STACK_SIGNAL``, writes them to
``stacks/<replica>.txt`` in the job dir, which is read back here (waiting ``STACK_WAIT`` at most)
without following a link.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..model.errors import BackendError, InvalidSpecError
from ..payloads.monitoring import StackDump
from ..runtime import contract
from ..runtime.regularfile import fd_beneath

METHODS = ("auto", "py-spy", "faulthandler")
STACK_WAIT = 5.0  # seconds the faulthandler dump may take to appear
PY_SPY_TIMEOUT = 30.0
MAX_STACK_BYTES = 256 * 1024  # of one dump that is returned
_TRUNCATE_ABOVE = 1 << 20  # the per-rank dump file is emptied first when it grew past this
_YAMA = Path("/proc/sys/kernel/yama/ptrace_scope")


def validate_method(method: str | None) -> str:
    method = method or "auto"
    if method not in METHODS:
        raise InvalidSpecError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    return method


def py_spy_path() -> str | None:
    """py-spy on PATH, or beside this Python (a virtualenv not activated)."""
    found = shutil.which("py-spy")
    beside = Path(sys.executable).parent / "py-spy"
    return found or (str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None)


def ptrace_hint() -> str:
    """Why ptrace may be refused here, from Yama's setting."""
    try:
        scope = _YAMA.read_text().strip()
    except OSError:
        return "py-spy needs ptrace permission over the rank (in a container: CAP_SYS_PTRACE)"
    return (
        f"kernel.yama.ptrace_scope is {scope}; py-spy needs 0 "
        "(sysctl kernel.yama.ptrace_scope=0) or CAP_SYS_PTRACE"
    )


def py_spy_dump(pid: int) -> tuple[str | None, str | None]:
    """(the dump, None), or (None, why py-spy could not take it)."""
    exe = py_spy_path()
    if exe is None:
        return None, "py-spy is not installed here (pip install py-spy)"
    try:
        done = subprocess.run(
            [exe, "dump", "--pid", str(pid)], capture_output=True, timeout=PY_SPY_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"py-spy failed: {exc}"
    if done.returncode != 0:
        error = (done.stderr or done.stdout).decode("utf-8", "replace").strip().splitlines()
        detail = error[-1] if error else f"exit code {done.returncode}"
        if "permission" in detail.lower() or "ptrace" in detail.lower():
            detail += f" ({ptrace_hint()})"
        return None, f"py-spy could not read the rank: {detail}"
    return done.stdout.decode("utf-8", "replace")[:MAX_STACK_BYTES], None


def faulthandler_dump(pid: int, job_dir: Path, replica: str, wait: float = STACK_WAIT) -> str:
    """Signal the rank and read what its faulthandler writes to ``stacks/<replica>.txt``.

    Every step goes through one descriptor opened beneath the job dir without following a link
    (``safefiles``): a link planted there by someone who can write to the job root is refused,
    never emptied or served. A hard link is refused too: the rank's own file has no other name."""
    name = f"{contract.STACKS_DIR}/{contract.stack_file(replica)}"
    try:
        fd = fd_beneath(job_dir, name.split("/"), os.O_RDWR)
    except FileNotFoundError:
        raise BackendError(
            "this rank has no stack dump handler (it was started before this version, or not "
            "through jupyter_disttrain's rank wrapper); install py-spy to read its stacks"
        ) from None
    except OSError as exc:
        raise BackendError(f"{name} is not the rank's own file ({exc.strerror or exc}): refused") from None
    try:
        return _signal_and_read(pid, fd, name, wait)
    finally:
        os.close(fd)


def _signal_and_read(pid: int, fd: int, name: str, wait: float) -> str:
    info = os.fstat(fd)
    if info.st_nlink != 1:
        raise BackendError(f"{name} has {info.st_nlink} names, not only its own: refused")
    size = info.st_size
    if size > _TRUNCATE_ABOVE:  # the rank appends (O_APPEND): it goes on at the new end
        os.ftruncate(fd, 0)
        size = 0
    os.kill(pid, getattr(signal, contract.STACK_SIGNAL))
    deadline = time.monotonic() + wait
    last = size
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = os.fstat(fd).st_size
        if now > size and now == last:  # written, and done writing
            break
        last = now
    if last <= size:
        raise BackendError(f"the rank (pid {pid}) wrote no stack within {wait:.0f} s")
    return os.pread(fd, MAX_STACK_BYTES, size).decode("utf-8", "replace")


def dump_stack(replica: str, pid: int, job_dir: Path, method: str = "auto") -> StackDump:
    """The stacks of the rank ``pid``: py-spy when asked or available, else faulthandler."""
    note = None
    if method in ("auto", "py-spy"):
        text, why = py_spy_dump(pid)
        if text is not None:
            return StackDump(replica, "py-spy", text, None)
        if method == "py-spy":
            raise BackendError(str(why))
        note = f"{why}; used faulthandler instead (only Python frames, no native ones)"
    return StackDump(replica, "faulthandler", faulthandler_dump(pid, job_dir, replica), note)


def dump_replica(job_dir: Path, job_id: str, replica: str, method: str = "auto") -> StackDump:
    """The stacks of ``replica`` of the job in ``job_dir``: a process of this machine, as its
    rank record names it (never a pid that another process reuses now)."""
    from ..storage.procs import runs_job
    from ..storage.store import read_json

    try:
        rec = read_json(job_dir / contract.RANKS_DIR / contract.record_file(replica))
    except (OSError, ValueError):
        raise BackendError(f"{replica} has not started yet: no process to read") from None
    if rec.get("exit_code") is not None:
        raise BackendError(f"{replica} has exited (code {rec['exit_code']}): no stack to read")
    pid = int(rec["pid"])
    if not runs_job(pid, job_id):  # never signal a pid reused by another process
        raise BackendError(f"{replica}'s process (pid {pid}) is gone")
    return dump_stack(replica, pid, job_dir, method)
