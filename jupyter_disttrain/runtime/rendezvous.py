"""torchrun's c10d rendezvous with every store on the loopback interface, for local jobs.

torch's TCPStore server binds the wildcard address whatever host it is given, so with plain
``--rdzv-backend=c10d`` (or ``--standalone``) the rendezvous store and the store the workers
share listen on every interface: any host that reaches the machine can read and write them, and
a pickled value written to the rendezvous state runs code in the agent. Here both stores are
created on a socket this module binds to 127.0.0.1 and hands to TCPStore (``master_listen_fd``).

torchrun finds this handler by name through torch's own plugin group, ``torchrun.handlers``
(see ``pyproject.toml``): ``--rdzv-backend=disttrain-loopback --rdzv-endpoint=127.0.0.1:PORT``,
with ``is_host=true`` in ``--rdzv-conf`` on the agent that hosts the store (port 0: any free port,
for a single agent). It runs inside the torchrun agent, where torch is already imported.
"""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous import RendezvousHandler, RendezvousParameters

NAME = "disttrain-loopback"
LOOPBACK = "127.0.0.1"
_TIMEOUTS = ("join", "last_call", "close", "heartbeat")


def loopback_listener(port: int) -> socket.socket:
    """A listening TCP socket on 127.0.0.1 (``port`` 0 picks a free one), for a store to serve."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK, port))
        sock.listen(socket.SOMAXCONN)
    except BaseException:
        sock.close()
        raise
    return sock


def serve_store(sock: socket.socket, timeout: timedelta | None = None) -> TCPStore:
    """The server side of a TCPStore on ``sock`` (``loopback_listener``), which it owns from here
    on (and closes with the server)."""
    from torch.distributed import TCPStore

    kwargs: dict[str, Any] = {"multi_tenant": True}
    if timeout is not None:
        kwargs["timeout"] = timeout
    port = sock.getsockname()[1]
    try:
        return TCPStore(LOOPBACK, port, is_master=True, master_listen_fd=sock.detach(), **kwargs)
    finally:
        sock.close()


def loopback_store(port: int, *, host: bool, timeout: timedelta | None = None) -> TCPStore:
    """A TCPStore on 127.0.0.1: the server side listens on a socket bound there (``port`` 0
    picks a free one), a client connects to it."""
    from torch.distributed import TCPStore

    if host:
        return serve_store(loopback_listener(port), timeout)
    kwargs: dict[str, Any] = {"multi_tenant": True}
    if timeout is not None:
        kwargs["timeout"] = timeout
    return TCPStore(LOOPBACK, port, is_master=False, **kwargs)


def create_handler(params: RendezvousParameters) -> RendezvousHandler:
    """The c10d rendezvous of torch, held in a loopback store, sharing a loopback store with
    the workers (``TORCHELASTIC_USE_AGENT_STORE``)."""
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        DynamicRendezvousHandler,
        RendezvousTimeout,
    )
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    class LoopbackRendezvousHandler(DynamicRendezvousHandler):
        def _create_tcp_store_server(self, master_addr: str, master_port: int) -> TCPStore:
            # The store rank 0's agent serves to every worker (its MASTER_ADDR/PORT).
            return loopback_store(master_port, host=True)

        def get_backend(self) -> str:
            return NAME  # torchrun checks that the handler is the one it asked for

    host, port = parse_rendezvous_endpoint(params.endpoint, default_port=0)
    if host not in (LOOPBACK, "localhost"):
        raise ValueError(f"the {NAME} rendezvous serves 127.0.0.1 only, not {host!r}")
    read_timeout = timedelta(seconds=params.get_as_int("read_timeout", 60) or 60)
    store = loopback_store(port, host=bool(params.get_as_bool("is_host", False)), timeout=read_timeout)
    timeouts = {}
    for key in _TIMEOUTS:
        seconds = params.get_as_int(f"{key}_timeout")
        if seconds is not None:
            timeouts[key] = timedelta(seconds=seconds)
    return LoopbackRendezvousHandler.from_backend(
        params.run_id,
        store,
        C10dRendezvousBackend(store, params.run_id),
        params.min_nodes,
        params.max_nodes,
        local_addr=LOOPBACK,
        timeout=RendezvousTimeout(**timeouts),
    )


def handler_factory() -> Callable[[RendezvousParameters], RendezvousHandler]:
    """The ``torchrun.handlers`` entry point: torch calls it for the handler's creator."""
    return create_handler
