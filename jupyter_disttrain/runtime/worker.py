"""Start one rank: send its output to its own log file, note its life, run the script.

torchrun runs ``python -u -m jupyter_disttrain.runtime.worker train.py ARGS...`` in place of
``python -u train.py ARGS...``. The script runs as ``__main__`` exactly as it would by hand
(it is ``sys.modules["__main__"]`` while it runs, so pickling and spawned DataLoader workers
behave the same). Output goes straight to ``$DISTTRAIN_LOG_DIR/rank-<RANK>.log`` (``<replica>.log`` for a
process named by ``DISTTRAIN_REPLICA``) with no pipe
and no extra thread, so nothing slows the training loop, and every line belongs to its rank.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import faulthandler
import gc
import io
import os
import signal
import socket
import sys
import threading
import time
import types
from typing import Any

from . import contract, debugsock
from .atomic import open_own, write_json
from .joined import joined_any, joined_world, watch

# Set in every process of a parameter-server job (ps-lite's, which MXNet uses).
_PS_ROLE_ENV = "DMLC_ROLE"


def _now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def _write_final_record(path: str, data: contract.RankRecord) -> None:
    """The rank's end, best effort: on a full disk the exit code still reaches torchrun (and
    the launcher) through the process's own exit, which must not turn into an OSError."""
    try:
        write_json(path, data)
    except OSError as exc:
        print(f"disttrain: could not record rank {data.get('rank')}'s exit: {exc}", file=sys.stderr)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    return exc.code if isinstance(exc.code, int) else 1


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m jupyter_disttrain.runtime.worker SCRIPT [ARGS...]")
    script = os.path.abspath(argv[0])
    # torchrun's RANK; horovodrun names it HOROVOD_RANK.
    rank = int(os.environ.get("RANK") or os.environ.get("HOROVOD_RANK") or "0")
    replica = os.environ.get(contract.REPLICA_ENV) or contract.rank_name(rank)
    log_dir = os.environ.get(contract.LOG_DIR_ENV)
    record_path = None
    record: contract.RankRecord = {}
    if log_dir:
        fd = open_own(os.path.join(log_dir, contract.log_file(replica)))
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        ranks_dir = os.path.join(os.path.dirname(log_dir), contract.RANKS_DIR)
        os.makedirs(ranks_dir, exist_ok=True)
        record_path = os.path.join(ranks_dir, contract.record_file(replica))
        _resume_if_restarted(record_path)
        record = {
            "rank": rank,
            "replica": replica,
            "local_rank": int(os.environ.get("LOCAL_RANK") or os.environ.get("HOROVOD_LOCAL_RANK") or "0"),
            "node": int(os.environ.get(contract.NODE_ENV, os.environ.get("GROUP_RANK", "0"))),
            "restarts": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "start_time": _now(),
        }
        write_json(record_path, record)
        _dump_stacks_on_signal(os.path.join(os.path.dirname(log_dir), contract.STACKS_DIR), rank)
    if os.environ.get(contract.CHECKPOINT_DIR_ENV) or os.environ.get(contract.RESUME_FROM_ENV):
        from .libresume import install

        install()
    sys.argv = [script, *argv[1:]]
    sys.path[0] = os.path.dirname(script)
    code = 1
    ended: SystemExit | None = None
    namespace = _main_module(script)
    watch()
    if job_dir := os.environ.get(contract.JOB_DIR_ENV):  # its collectives and stacks, on demand
        debugsock.serve(job_dir, replica)
    if os.environ.get(contract.KEEP_CHECKPOINTS_ENV):  # --keep-checkpoints: rank 0 prunes
        from . import retention  # (with the scanner) only in the jobs that asked

        retention.start(rank)
    job_dir = os.environ.get(contract.JOB_DIR_ENV)
    try:
        with open(script, "rb") as f:
            source = f.read()
        _debugger(replica, job_dir, source)
        exec(compile(source, script, "exec"), namespace)
        _write_out(namespace, rank, job_dir, 0)
        code = 0
    except SystemExit as exc:
        code, ended = _exit_code(exc), exc
        _write_out(namespace, rank, job_dir, code)
    except BaseException as exc:
        _end_open_runs(exc)
        _post_mortem(exc)  # before the traceback: the log still ends with it (the failure's story)
        _print_uncaught(exc)
        if not os.environ.get(_PS_ROLE_ENV):
            sys.excepthook = _already_printed
            raise  # Python ends the process as for any uncaught error: exit 1 (SIGINT's death)
        # a parameter-server process ends below (see there)
    finally:
        if record_path:
            record.update({"exit_code": code, "finish_time": _now(), "joined_world": joined_world()})
            record["cpu_seconds"] = round(sum(os.times()[:4]), 3)  # with its reaped children's
            _write_final_record(record_path, record)
    if ended is not None and isinstance(ended.code, str):
        print(ended.code, file=sys.stderr)  # what ``sys.exit("message")`` prints
    _exit_before_teardown(code, failed_peer=code != 0 and bool(os.environ.get(_PS_ROLE_ENV)))
    if ended is not None:
        raise ended


def _print_uncaught(exc: BaseException) -> None:
    """Print ``exc`` as ``python SCRIPT`` would, through the hook the script may have set: from
    the script's first frame, none of this wrapper's (a SyntaxError the compile raised: no frame
    at all). Its caller's frames (runpy's, the warm fork's) are not in ``exc``'s traceback yet."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == main.__code__.co_filename:
        tb = tb.tb_next
    # the default hook shows the exception's own traceback, not the one it is given
    exc = exc.with_traceback(tb)
    try:
        sys.excepthook(type(exc), exc, tb)
    except Exception:  # the script's own hook failed: Python's prints it then
        sys.__excepthook__(type(exc), exc, tb)


def _debugger(replica: str, job_dir: str | None, source: bytes) -> None:
    """``breakpoint()`` and ``--pdb``: a prompt in the notebook (debugger.py)."""
    if job_dir:
        from . import debugger

        debugger.install(replica, job_dir, source)


def _write_out(namespace: dict[str, Any], rank: int, job_dir: str | None, code: int) -> None:
    """``--out``: the values the cell named, written once its body ended without an error
    (``sys.exit(0)`` included; outvalues.py)."""
    if code != 0 or not job_dir or not os.environ.get(contract.OUT_ENV):
        return
    from . import outvalues

    asked = outvalues.requested(os.environ)
    if asked:
        outvalues.write(namespace, rank, job_dir, asked)


def _post_mortem(exc: BaseException) -> None:
    """``--pdb``: the first failing rank's prompt in the frame that raised, before it ends."""
    debugger = sys.modules.get("jupyter_disttrain.runtime.debugger")
    if debugger is not None and os.environ.get(contract.PDB_ENV):
        try:
            debugger.post_mortem(exc)
        except BaseException as error:  # the prompt, not the rank's own failure, went wrong
            print(f"disttrain: the post-mortem prompt ended: {error!r}", file=sys.stderr)


def _already_printed(*_: object) -> None:
    """The hook Python calls for the error ``main`` re-raises: it was printed once already."""


def _end_open_runs(exc: BaseException) -> None:
    """Write the ``em`` runs' waiting points and mark them failed now, while this thread is in
    Python and nothing is torn down. Left to ``atexit``, they depend on an interpreter exit that
    a broken process group can abort or hang first (see ``_exit_before_teardown``): CI once saw a
    restarted group whose first attempt's points were all missing."""
    exits = sys.modules.get("jupyter_disttrain.em.exits")  # only a script that used em has runs
    if exits is not None:
        exits.end_open_runs(exc)


# Set on a restart: by torchrun's agent (``--max-restarts``) and by Slurm on a requeue.
_RESTART_COUNT_ENVS = ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT")


def _resume_if_restarted(record_path: str) -> None:
    """A restarted rank starts from the job's newest checkpoint (``restarts.py``). A restart is
    a restart count above 0, or this replica's record from an earlier start already in the job
    dir (a requeue or a replaced process on the same job dir). A first start costs two variable
    reads and one ``stat``: ``restarts.py`` and the scanner are imported only on a restart."""
    counted = any(os.environ.get(name, "0") not in ("", "0") for name in _RESTART_COUNT_ENVS)
    if counted or os.path.exists(record_path):
        from .restarts import resume_from_newest, separate_attempt_store

        separate_attempt_store()
        resume_from_newest(os.environ.get(contract.JOB_DIR_ENV))


_stack_file: io.IOBase | None = None  # kept open for faulthandler, which writes to its fd


def _dump_stacks_on_signal(stacks_dir: str, rank: int) -> None:
    """On ``contract.STACK_SIGNAL``, write every thread's Python stack to
    ``stacks/rank-N.txt`` (the fallback of "dump the stacks" where py-spy cannot attach). The
    file exists from here on: it tells the caller that the signal is safe to send."""
    global _stack_file
    signum = getattr(signal, contract.STACK_SIGNAL, None)
    if signum is None:  # not on this platform
        return
    try:
        os.makedirs(stacks_dir, exist_ok=True)
        path = os.path.join(stacks_dir, contract.stack_file(contract.rank_name(rank)))
        _stack_file = open(open_own(path), "ab", buffering=0)  # noqa: SIM115 (open for the rank's life)
        faulthandler.register(signum, file=_stack_file, all_threads=True)
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"disttrain: no stack dumps on {contract.STACK_SIGNAL} for this rank: {exc}", file=sys.stderr)


def _main_module(script: str) -> dict[str, Any]:
    """A fresh ``__main__`` for ``script``, as ``runpy.run_path`` makes it, that stays
    ``sys.modules["__main__"]`` (runpy would restore the previous one) so the script's objects
    live until the rank exits."""
    module = types.ModuleType("__main__")
    module.__file__ = script
    module.__loader__ = module.__spec__ = module.__package__ = None
    module.__builtins__ = builtins  # type: ignore[attr-defined]
    sys.modules["__main__"] = module
    return module.__dict__


def _exit_before_teardown(code: int, *, failed_peer: bool = False) -> None:
    """End a rank that used a process group, skipping the interpreter's teardown.

    ``failed_peer``: a parameter-server process whose script failed ends the same way. At
    teardown, MXNet's kvstore waits in a barrier for every worker, and the others wait for this
    one's push: the process would never exit and the job would never fail.

    Tearing down torch's C++ state there, gloo's threads included, now and then aborts a rank
    that finished its work, even after ``destroy_process_group`` (``terminate called without an
    active exception``, SIGABRT: 1 in 12 Accelerate jobs on a loaded machine), and torchrun
    then fails the whole job. What Python does before its teardown that users rely on still
    happens: non-daemon threads are joined, atexit functions run (logging's flush and
    ``weakref.finalize`` among them), files the script left open are flushed, output is flushed.

    The script's objects are deliberately not released: an object that holds a process group
    (a DDP model keeps its group after ``destroy_process_group``) would run the group's C++
    destructor, which waits for gloo's threads while holding the GIL those threads need
    (a deadlock seen in CI). Nothing is lost by keeping them: the process ends with ``_exit``.
    """
    if not (joined_any() or failed_peer):
        return
    gc.disable()  # an automatic collection could release such a group just the same
    main_thread = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main_thread and not thread.daemon and not failed_peer:
            thread.join()  # a failed parameter-server process's threads may wait for its peers
    atexit._run_exitfuncs()
    _flush_open_files()
    os._exit(code)


def _flush_open_files() -> None:
    """Flush what the script wrote to files it never closed, as their finalizers would. (A warm
    rank's collector tracks only what its process made: the zygote froze what it had, standard
    streams included, hence those by name.)"""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    for obj in gc.get_objects():
        # type(), not isinstance(): that reads ``__class__``, which some objects turn into a
        # warning (torch's deprecated ``reduce_op``) that would land in the rank's log.
        if issubclass(type(obj), io.IOBase) and obj is not sys.stdin:
            with contextlib.suppress(Exception):
                if not obj.closed:
                    obj.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
