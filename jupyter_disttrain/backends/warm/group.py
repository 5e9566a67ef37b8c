"""A forked agent's place in its job's group of nodes: what torchrun's agent learns from its
rendezvous before it starts its ranks (their global and role ranks, the world's size, the store
they meet in), found here with torch's own code so that a warm rank's numbers are a cold one's.

One node (``one_node``): the agent serves the ranks' store itself, on loopback, as a local job's
torchrun does with its loopback rendezvous; no rendezvous round is needed. Several nodes
(``join``): the agent joins torchrun's rendezvous of the command line (``--rdzv-backend``, the
endpoint, ``--rdzv-conf``'s ``is_host``), as ``torch.distributed.launcher.api.launch_agent`` makes
it, and assigns the ranks as ``SimpleElasticAgent._assign_worker_ranks`` does. The rendezvous
store runs threads: a caller forks its ranks before it joins.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from argparse import Namespace

    from torch.distributed import Store
    from torch.distributed.elastic.rendezvous import RendezvousHandler

# torchrun's own: how long an agent waits for the others once its ranks have ended
# (``SimpleElasticAgent``'s ``exit_barrier_timeout``).
EXIT_BARRIER_TIMEOUT = 300.0


@dataclass(frozen=True)
class Placement:
    """One agent's ranks in the job's group, as ``LocalElasticAgent._start_workers`` reads them."""

    group_rank: int
    group_world_size: int
    base_rank: int  # the global rank of local rank 0 (the others follow it)
    world_size: int
    base_role_rank: int
    role_world_size: int
    master_addr: str
    master_port: int
    run_id: str
    use_agent_store: bool


def one_node(nproc: int, run_id: str, addr: str, port: int) -> Placement:
    """The only agent of a job: its ranks are the group, its store at ``addr:port``."""
    return Placement(0, 1, 0, nproc, 0, nproc, addr, port, run_id, True)


class Joined:
    """This agent's turn of the rendezvous: its handler, the store it shares with the other
    agents (and, ``use_agent_store``, with the ranks), its place."""

    def __init__(self, handler: RendezvousHandler, store: Store, place: Placement) -> None:
        self.handler = handler
        self.store = store
        self.place = place

    def exit_barrier(self) -> None:
        """Wait for the other agents' ranks to end, as torchrun's agent does after its ranks
        succeeded: node 0's agent serves the store they may still use."""
        from torch.distributed.elastic.agent.server.api import _TERMINAL_STATE_SYNC_ID
        from torch.distributed.elastic.utils.store import barrier

        try:
            barrier(
                self.store,
                self.place.group_world_size,
                key_prefix=_TERMINAL_STATE_SYNC_ID,
                barrier_timeout=EXIT_BARRIER_TIMEOUT,
            )
        except Exception as exc:  # torchrun logs it and ends as its ranks did
            print(f"Error waiting on exit barrier: {exc}", flush=True)

    def shutdown(self) -> None:
        """Close the rendezvous, as ``launch_agent`` does unless a signal ended the agent."""
        self.handler.shutdown()


def join(options: Namespace) -> Joined:
    """Join the rendezvous of torchrun's parsed command line ``options`` (in this process's
    environment: ``PET_*`` fill what the line leaves out), as ``torchrun`` would."""
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent
    from torch.distributed.elastic.rendezvous import RendezvousParameters, registry
    from torch.distributed.run import config_from_args

    config, _, _ = config_from_args(options)
    # As torchrun's ``launch_agent`` makes them.
    where = (config.rdzv_backend, config.rdzv_endpoint, config.run_id, config.min_nodes, config.max_nodes)
    params = RendezvousParameters(*where, local_addr=config.local_addr, **config.rdzv_configs)
    handler = registry.get_rendezvous_handler(params)
    info = handler.next_rendezvous()
    # torch's own assignment (its ``self`` is unused): the group's ranks as a cold agent's.
    spec: Any = _Spec(config.role, config.nproc_per_node)
    first = SimpleElasticAgent._assign_worker_ranks(None, info.store, info.rank, info.world_size, spec)[0]
    bootstrap = info.bootstrap_store_info
    if bootstrap is None:  # torch's handlers all say where the ranks' store is
        raise RuntimeError(f"the {params.backend} rendezvous did not say where the ranks' store is")
    ranks = (first.global_rank, first.world_size, first.role_rank, first.role_world_size)
    store_at = (str(bootstrap.master_addr), int(bootstrap.master_port))
    place = Placement(
        info.rank, info.world_size, *ranks, *store_at, handler.get_run_id(), handler.use_agent_store
    )
    return Joined(handler, info.store, place)


def join_interruptibly(options: Namespace) -> Joined:
    """``join`` in a thread of its own, so that a signal (a cancel, the pool pod of another node
    lost) ends the wait here at once: torch's store waits for the other agents in C++, where no
    Python signal handler runs, up to the rendezvous' timeout. The caller's handler raises in
    this thread; the joining thread ends with the process."""
    done: list[tuple[Joined | None, BaseException | None]] = []

    def run() -> None:
        try:
            done.append((join(options), None))
        except BaseException as exc:  # handed to the caller as it is
            done.append((None, exc))

    thread = threading.Thread(target=run, name="rendezvous", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
    joined, exc = done[0]
    if exc is not None:
        raise exc
    assert joined is not None
    return joined


@dataclass(frozen=True)
class _Spec:
    """What ``_assign_worker_ranks`` reads of a ``WorkerSpec``."""

    role: str
    local_world_size: int
