"""Run TensorBoard so that it ends with the Jupyter server that started it.

TensorBoard runs in a session of its own (a signal to the server's terminal must not reach
it), which also means nothing ends it if the server is killed outright. This wrapper asks
Linux to send it SIGTERM when its parent dies (``PR_SET_PDEATHSIG``, kept across ``exec``),
then becomes TensorBoard.

    python -m jupyter_disttrain.server.tb_exec SERVER_PID COMMAND [ARGS...]
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m jupyter_disttrain.server.tb_exec PID COMMAND [ARGS...]", file=sys.stderr)
        return 2
    server_pid, command = int(argv[0]), argv[1:]
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != server_pid:  # the server died before the request took effect
        return 1
    os.execvp(command[0], command)
    return 127  # not reached: exec replaces this process or raises


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
