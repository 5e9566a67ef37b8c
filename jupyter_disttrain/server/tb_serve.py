"""Serve TensorBoard on a Unix socket instead of a TCP port.

TensorBoard has no authentication: on a TCP port, even 127.0.0.1, every local user of the
machine can read it. On a Unix socket inside a directory only the server's user can enter
(0700), only that user and the Jupyter proxy (which checks Jupyter's auth) reach it.
Stock TensorBoard cannot do this (its server assumes a host and port), so this runs
TensorBoard's own program with a server class that binds the socket.

    PYTHON tb_serve.py SOCKET_PATH [TENSORBOARD FLAGS...]

Standalone on purpose (no jupyter_disttrain import): it is run as a file by whichever
Python has TensorBoard installed (``DistTrainApp.tensorboard_command``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

# Run as a file, Python puts this directory first on sys.path, where tensorboard.py (the
# manager) would shadow the tensorboard package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python tb_serve.py SOCKET_PATH [TENSORBOARD FLAGS...]", file=sys.stderr)
        return 2
    socket_path, flags = argv[0], argv[1:]

    from absl import app
    from tensorboard import default, program
    from werkzeug import serving

    class UnixSocketServer(serving.ThreadedWSGIServer, program.TensorBoardServer):
        daemon_threads = True

        def __init__(self, wsgi_app: Any, tb_flags: Any) -> None:
            if os.path.exists(socket_path):  # left by a crashed predecessor of this instance
                os.unlink(socket_path)
            super().__init__(f"unix://{socket_path}", 0, wsgi_app)

        def get_url(self) -> str:
            # TensorBoard records this in its info file and parses a port from it.
            return "http://localhost:0/"

        def print_serving_message(self) -> None:
            print(f"TensorBoard serving on unix socket {socket_path}", file=sys.stderr, flush=True)

    tensorboard = program.TensorBoard(plugins=default.get_plugins(), server_class=UnixSocketServer)
    app.run(tensorboard.main, argv=[sys.argv[0], *flags], flags_parser=tensorboard.configure)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
