"""Start one rank: send its output to its own log file, note its life, run the script.

torchrun runs ``python -u -m jupyter_disttrain.runtime.worker train.py ARGS...`` in place of
``python -u train.py ARGS...``. The script runs as ``__main__`` exactly as it would by hand
(``runpy`` puts it in ``sys.modules["__main__"]``, so pickling and spawned DataLoader workers
behave the same). Output goes straight to ``$DISTTRAIN_LOG_DIR/rank-<RANK>.log`` with no pipe
and no extra thread, so nothing slows the training loop, and every line belongs to its rank.
"""

from __future__ import annotations

import json
import os
import runpy
import socket
import sys
import time

from .joined import joined_world, watch


def _now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def _write_record(path: str, data: dict[str, object]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    return exc.code if isinstance(exc.code, int) else 1


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m jupyter_disttrain.runtime.worker SCRIPT [ARGS...]")
    script = os.path.abspath(argv[0])
    rank = int(os.environ.get("RANK", "0"))
    log_dir = os.environ.get("DISTTRAIN_LOG_DIR")
    record_path = None
    record: dict[str, object] = {}
    if log_dir:
        fd = os.open(os.path.join(log_dir, f"rank-{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        ranks_dir = os.path.join(os.path.dirname(log_dir), "ranks")
        os.makedirs(ranks_dir, exist_ok=True)
        record_path = os.path.join(ranks_dir, f"rank-{rank}.json")
        record = {
            "rank": rank,
            "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
            "node": int(os.environ.get("DISTTRAIN_NODE", os.environ.get("GROUP_RANK", "0"))),
            "restarts": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "start_time": _now(),
        }
        _write_record(record_path, record)
    sys.argv = [script, *argv[1:]]
    sys.path[0] = os.path.dirname(script)
    code = 1
    watch()
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
        raise
    finally:
        if record_path:
            record.update(exit_code=code, finish_time=_now(), joined_world=joined_world())
            _write_record(record_path, record)


if __name__ == "__main__":
    main(sys.argv[1:])
