"""``horovodrun`` for a local job, with every server it starts bound to loopback.

Horovod's runner (0.28.1) binds its gloo rendezvous store, and the other HTTP services it may
start, through ``horovod.runner.util.network.find_port``, which binds ``('', port)``: every
interface of the machine, with no flag or variable to change it. A local job's ranks reach it
on the address of ``--network-interfaces lo`` (127.0.0.1), so nothing outside needs it. This
module puts a ``find_port`` that binds 127.0.0.1 in place of Horovod's, in each module that
imported it, and then runs ``horovod.runner.launch`` as ``python -m horovod.runner.launch``
would. It runs in the job's agent process (the backend's ``roles``): Horovod is imported only
there.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

LOOPBACK = "127.0.0.1"
# The modules of Horovod's runner that bind through find_port (each imported it by name).
_BINDERS = (
    "horovod.runner.util.network",
    "horovod.runner.http.http_server",
    "horovod.runner.common.util.network",
)


def find_port(server_factory: Callable[[tuple[str, int]], Any]) -> tuple[Any, int]:
    """(the server made by ``server_factory`` on a free loopback port, that port); the kernel
    picks the port, where Horovod tries random ones in turn."""
    server = server_factory((LOOPBACK, 0))
    return server, int(server.server_address[1])


def bind_to_loopback() -> None:
    """Every server Horovod's runner starts from here on listens on loopback only."""
    import importlib

    for name in _BINDERS:
        vars(importlib.import_module(name))["find_port"] = find_port


def main() -> None:
    bind_to_loopback()
    from horovod.runner.launch import run_commandline

    sys.argv[0] = "horovodrun"
    run_commandline()


if __name__ == "__main__":
    main()
