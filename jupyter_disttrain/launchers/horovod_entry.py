"""What torchrun runs in a Horovod job's pods: ``horovod_entry.py SCRIPT ARGS...``.

On Kubernetes a Horovod job's pods run torchrun as torchrun jobs do, one pod per node; torchrun
starts this program in place of the script. It gives the process the environment ``horovodrun
--gloo`` would give it (Horovod's ranks are torchrun's), starts Horovod's rendezvous server in
rank 0's process on a fixed port (horovodrun's picks a random one, which the other pods could
not know), and runs the script as ``python SCRIPT ARGS`` would.

It is shipped beside the script and runs in the user's image, where jupyter_disttrain may not be
installed: the standard library and horovod only.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

# Horovod's rendezvous server, in rank 0's process; not MASTER_PORT (torch's store is there).
RENDEZVOUS_PORT = 29501
PORT_ENV = "HOROVOD_GLOO_RENDEZVOUS_PORT"
ADDR_ENV = "HOROVOD_GLOO_RENDEZVOUS_ADDR"
# How long the other ranks wait for rank 0's server: torchrun starts every node's workers
# together, so it is up within seconds unless rank 0's process failed.
WAIT_SECONDS = 120.0
NO_HOROVOD = (
    "horovod_entry.py: horovod is not importable in this image: use an image with horovod built "
    "with PyTorch and gloo (HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 pip install horovod)"
)


def host_name(group_rank: int | str) -> str:
    """The name Horovod knows a node by (its ``local_<host>`` scope): torchrun's node rank."""
    return f"node-{group_rank}"


def horovod_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables ``horovodrun --gloo`` gives a process, from torchrun's (``RANK``,
    ``GROUP_RANK``...). The layout is torchrun's, always; of the settings, those already in
    ``environ`` win (a user's ``HOROVOD_GLOO_IFACE``, another port)."""
    layout = {
        "HOROVOD_HOSTNAME": host_name(environ["GROUP_RANK"]),
        "HOROVOD_RANK": environ["RANK"],
        "HOROVOD_SIZE": environ["WORLD_SIZE"],
        "HOROVOD_LOCAL_RANK": environ["LOCAL_RANK"],
        "HOROVOD_LOCAL_SIZE": environ["LOCAL_WORLD_SIZE"],
        # Horovod's cross rank is the node's index among those with this local rank: with
        # torchrun's equal nodes, its node rank.
        "HOROVOD_CROSS_RANK": environ["GROUP_RANK"],
        "HOROVOD_CROSS_SIZE": environ["GROUP_WORLD_SIZE"],
    }
    settings = {
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        # Every torchrun worker gets the address of the node that runs rank 0.
        ADDR_ENV: environ["MASTER_ADDR"],
        PORT_ENV: str(RENDEZVOUS_PORT),
        "PYTHONUNBUFFERED": "1",
    }
    iface = environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0]
    if iface:  # torch's gloo interface is Horovod's too (horovodrun gives it one, its first)
        settings["HOROVOD_GLOO_IFACE"] = iface
    return {**layout, **{k: environ.get(k) or v for k, v in settings.items()}}


def host_plan(env: Mapping[str, str]) -> list[Any]:
    """Horovod's slots for the job (``SlotInfo``s): ``GROUP_WORLD_SIZE`` nodes named as in
    ``HOROVOD_HOSTNAME``, ``LOCAL_WORLD_SIZE`` ranks each."""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts

    nodes, slots = int(env["HOROVOD_CROSS_SIZE"]), int(env["HOROVOD_LOCAL_SIZE"])
    hosts = parse_hosts(",".join(f"{host_name(i)}:{slots}" for i in range(nodes)))
    return list(get_host_assignments(hosts, int(env["HOROVOD_SIZE"])))


def start_rendezvous(env: Mapping[str, str]) -> Any:
    """Horovod's rendezvous server for ``env``'s job on its port, on every interface of this
    pod, served by a daemon thread; returns the server. It ends with rank 0's process, which
    outlives every rank's rendezvous: ``hvd.init()`` ends with an allgather over gloo."""
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    server = RendezvousHTTPServer(("", int(env[PORT_ENV])), RendezvousHandler, 0)
    server.init(host_plan(env))
    threading.Thread(target=server.serve_forever, name="horovod-rendezvous", daemon=True).start()
    return server


def wait_for_rendezvous(addr: str, port: int, timeout: float = WAIT_SECONDS) -> bool:
    """Whether rank 0's server answered within ``timeout`` seconds (Horovod's own client gives
    up after three tries half a second apart). Any HTTP answer counts: an unknown key is a 404."""
    deadline = time.monotonic() + timeout
    url = f"http://{addr}:{port}/disttrain/ready"
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)


def run_script(script: str, args: list[str]) -> None:
    """Run ``script`` as ``__main__`` with its arguments, as ``python SCRIPT ARGS`` would."""
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: horovod_entry.py SCRIPT [ARGS...] (under torchrun)", file=sys.stderr)
        return 2
    # The script's dir first on sys.path, in place of this file's, before horovod is looked up.
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    try:
        env = horovod_env(os.environ)
    except KeyError as exc:
        print(f"horovod_entry.py runs under torchrun: {exc.args[0]} is not set", file=sys.stderr)
        return 2
    if importlib.util.find_spec("horovod") is None:
        print(NO_HOROVOD, file=sys.stderr)
        return 1
    os.environ.update(env)
    if env["HOROVOD_RANK"] == "0":
        try:
            start_rendezvous(env)
        except ImportError:
            print(NO_HOROVOD, file=sys.stderr)
            return 1
        except OSError as exc:
            print(
                f"horovod_entry.py: Horovod's rendezvous server cannot listen on port {env[PORT_ENV]}: "
                f"{exc.strerror or exc}; set another with --env {PORT_ENV}=<port>",
                file=sys.stderr,
            )
            return 1
    elif not wait_for_rendezvous(env[ADDR_ENV], int(env[PORT_ENV])):
        print(
            f"horovod_entry.py: Horovod's rendezvous server on {env[ADDR_ENV]}:{env[PORT_ENV]} (rank 0's "
            f"pod) did not answer in {WAIT_SECONDS:.0f} s; see rank 0's log",
            file=sys.stderr,
        )
        return 1
    run_script(argv[0], argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
