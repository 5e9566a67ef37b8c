"""Horovod's entry program (``launchers/horovod_entry.py``), what a Horovod job's pods run under
torchrun, tested with the real parts it meets there: real torchrun (one node, and two nodes on
loopback) and Horovod 0.28.1's own runner, whose source release (pure Python; Horovod's C++ part
does not build against torch 2.x here, see the README) is fetched once into the user's cache
(``tests/venvs.py``) and put on the ranks' ``PYTHONPATH`` only, never into the test venv.

The ranks speak Horovod's gloo rendezvous protocol (``horovod/common/gloo/http_store.cc``: PUT
``/<scope>/<rank>``, GET until every rank's key answers 200, DELETE ``/<scope>/<rank>`` when
done) to the server rank 0's entry started, in the three scopes ``hvd.init()`` meets: global,
``local_<HOROVOD_HOSTNAME>`` and ``cross_<HOROVOD_LOCAL_RANK>``.
"""

from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain.launchers import horovod_entry
from jupyter_disttrain.launchers.horovod_entry import NO_HOROVOD, horovod_env
from tests.venvs import VenvUnavailable, ensure_source

ENTRY = Path(horovod_entry.__file__)
HOROVOD = ("horovod", "0.28.1")
HOROVOD_CHECK = (
    "import horovod.runner.http.http_server, horovod.runner.common.util.hosts, horovod.runner.gloo_run"
)
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
TORCHRUN_LAYOUT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE")

# The script the ranks run through the entry: Horovod's HTTPStore client in Python, then what
# horovodrun would have set for this rank by Horovod's own code, then the environment.
RANK_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time, urllib.error, urllib.request

    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.gloo_run import create_run_env_vars, create_slot_env_vars

    env = os.environ
    base = f"http://{env['HOROVOD_GLOO_RENDEZVOUS_ADDR']}:{env['HOROVOD_GLOO_RENDEZVOUS_PORT']}"

    def http(method, path, body=None):
        for attempt in range(3):  # as HTTPStore::PerformHTTP: 3 tries, 500 ms apart
            req = urllib.request.Request(base + path, data=body, method=method)
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return resp.status, resp.read().decode()
            except urllib.error.HTTPError as err:
                return err.code, ""
            except OSError:
                if attempt == 2:
                    raise
                time.sleep(0.5)

    def mesh(scope, rank, size):
        assert http("PUT", f"/{scope}/{rank}", env["HOROVOD_RANK"].encode())[0] == 200
        seen, deadline = {}, time.monotonic() + 60
        while len(seen) < size and time.monotonic() < deadline:
            for other in range(size):
                status, body = http("GET", f"/{scope}/{other}")
                if status == 200:
                    seen[other] = int(body)
            time.sleep(0.05)
        http("DELETE", f"/{scope}/{rank}")
        return [seen.get(i) for i in range(size)]

    views = {
        what: mesh(scope, int(env[rank]), int(env[size]))
        for what, scope, rank, size in (
            ("global", "global", "HOROVOD_RANK", "HOROVOD_SIZE"),
            ("local", "local_" + env["HOROVOD_HOSTNAME"], "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"),
            ("cross", "cross_" + env["HOROVOD_LOCAL_RANK"], "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE"),
        )
    }
    hosts = ",".join(f"node-{i}:{env['LOCAL_WORLD_SIZE']}" for i in range(int(env["GROUP_WORLD_SIZE"])))
    slot = get_host_assignments(parse_hosts(hosts), int(env["WORLD_SIZE"]))[int(env["RANK"])]
    run = create_run_env_vars(env["MASTER_ADDR"], ["lo"], env["HOROVOD_GLOO_RENDEZVOUS_PORT"])
    horovodrun = {**create_slot_env_vars(slot), **run, "PYTHONUNBUFFERED": "1"}
    horovodrun.pop("NCCL_SOCKET_IFNAME")  # NCCL's interface stays the user's (torch's too)
    out = {"env": dict(env), "views": views, "horovodrun": horovodrun, "argv": sys.argv, "path0": sys.path[0]}
    with open(os.path.join(sys.argv[1], f"rank-{env['RANK']}.tmp"), "w") as f:
        json.dump(out, f)
    os.rename(f.name, f.name[:-4] + ".json")
    # Rank 0's process (the server's) leaves last, as hvd.init()'s closing allgather over gloo
    # makes it: the others' last requests must find the server.
    deadline = time.monotonic() + 60
    while env["RANK"] == "0" and time.monotonic() < deadline:
        if sum(n.endswith(".json") for n in os.listdir(sys.argv[1])) == int(env["WORLD_SIZE"]):
            break
        time.sleep(0.1)
    """
)


@pytest.fixture(scope="session")
def horovod_src() -> str:
    """Horovod 0.28.1's unpacked source (its runner imports without a build); skips the test,
    with the reason, where it cannot be fetched."""
    try:
        return str(ensure_source(*HOROVOD, HOROVOD_CHECK))
    except VenvUnavailable as exc:
        pytest.skip(f"no Horovod source: {exc}")


def _torchrun_layout(*, rank: int, nodes: int, per_node: int, master: str = "127.0.0.1") -> dict[str, str]:
    """What torchrun gives rank ``rank`` of ``nodes`` nodes of ``per_node`` ranks."""
    layout = {"RANK": rank, "WORLD_SIZE": nodes * per_node, "LOCAL_RANK": rank % per_node}
    layout |= {"LOCAL_WORLD_SIZE": per_node, "GROUP_RANK": rank // per_node, "GROUP_WORLD_SIZE": nodes}
    return {**{k: str(v) for k, v in layout.items()}, "MASTER_ADDR": master}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_env(pythonpath: str, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "PET_"))}
    # The port is the user's here (two test runs at once must not meet); gloo's interface too.
    ours = {"PYTHONPATH": pythonpath, "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo"}
    return {**env, **ours}


def _torchrun_nodes(tmp_path: Path, horovod_src: str, nodes: int) -> list[dict]:
    """Run ``torchrun --nnodes NODES --nproc-per-node 2`` on the entry and the rank script, one
    torchrun per node, as the pods would (static rendezvous on loopback); each rank's record."""
    (tmp_path / "train.py").write_text(RANK_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    env = _rank_env(horovod_src, _free_port())
    master = ["--master-addr", "127.0.0.1", "--master-port", str(_free_port())]
    script = [str(ENTRY), str(tmp_path / "train.py"), str(out)]
    agents = []
    for node in range(nodes):
        layout = ["--nnodes", str(nodes), "--node-rank", str(node), "--nproc-per-node", "2", *master]
        argv = [*TORCHRUN, *layout, *script]
        merged = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
        agents.append(subprocess.Popen(argv, env=env, cwd=tmp_path, text=True, **merged))
    for agent in agents:
        output, _ = agent.communicate(timeout=240)
        assert agent.returncode == 0, output[-3000:]
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(2 * nodes)]


@pytest.mark.parametrize("nodes", [1, 2])
def test_torchrun_ranks_get_horovodruns_environment_and_meet_at_rank_0s_server(
    tmp_path: Path, horovod_src: str, nodes: int
) -> None:
    records = _torchrun_nodes(tmp_path, horovod_src, nodes)
    size = 2 * nodes
    for rank, record in enumerate(records):
        env = record["env"]
        # What horovodrun -H node-0:2[,node-1:2] -np N --gloo gives this rank, by Horovod's own code.
        assert {k: env.get(k) for k in record["horovodrun"]} == record["horovodrun"]
        assert (env["HOROVOD_RANK"], env["HOROVOD_HOSTNAME"]) == (str(rank), f"node-{rank // 2}")
        assert env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == env["MASTER_ADDR"]
        assert horovod_env(env) == {k: env[k] for k in horovod_env(env)}  # the mapping, in-process
        # Rank 0's server saw every rank of each scope: everyone, its node's, its local rank's.
        assert record["views"] == {
            "global": list(range(size)),
            "local": [rank // 2 * 2, rank // 2 * 2 + 1],
            "cross": [node * 2 + rank % 2 for node in range(nodes)],
        }
        # The script ran as `python train.py OUT` would have run it.
        assert record["argv"] == [str(tmp_path / "train.py"), str(tmp_path / "out")]
        assert record["path0"] == str(tmp_path)


def test_torchruns_layout_maps_to_horovods() -> None:
    torchrun = _torchrun_layout(rank=5, nodes=2, per_node=4, master="job-node-0.job")
    assert horovod_env(torchrun) == {
        "HOROVOD_HOSTNAME": "node-1",
        "HOROVOD_RANK": "5",
        "HOROVOD_SIZE": "8",
        "HOROVOD_LOCAL_RANK": "1",
        "HOROVOD_LOCAL_SIZE": "4",
        "HOROVOD_CROSS_RANK": "1",
        "HOROVOD_CROSS_SIZE": "2",
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": "job-node-0.job",
        "HOROVOD_GLOO_RENDEZVOUS_PORT": "29501",
        "PYTHONUNBUFFERED": "1",
    }
    # The user's settings win (and torch's gloo interface is Horovod's); the layout is torchrun's.
    user = {"HOROVOD_GLOO_IFACE": "eth1", "HOROVOD_GLOO_RENDEZVOUS_PORT": "30000", "HOROVOD_RANK": "0"}
    mapped = horovod_env({**torchrun, **user, "GLOO_SOCKET_IFNAME": "eth0,eth2"})
    assert (mapped["HOROVOD_GLOO_IFACE"], mapped["HOROVOD_GLOO_RENDEZVOUS_PORT"]) == ("eth1", "30000")
    assert mapped["HOROVOD_RANK"] == "5"
    assert horovod_env({**torchrun, "GLOO_SOCKET_IFNAME": "eth0,eth2"})["HOROVOD_GLOO_IFACE"] == "eth0"


def _entry(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ENTRY), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_the_entry_refuses_in_one_line_without_torchrun_or_horovod(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("raise SystemExit('the script must not run')\n")
    plain = {k: v for k, v in os.environ.items() if k not in TORCHRUN_LAYOUT and k != "PYTHONPATH"}
    done = _entry(["train.py"], plain, tmp_path)
    assert (done.returncode, done.stderr.strip()) == (
        2,
        "horovod_entry.py runs under torchrun: GROUP_RANK is not set",
    )
    # Under torchrun in an image without horovod (this venv has none): one line, nothing ran.
    layout = _torchrun_layout(rank=0, nodes=1, per_node=1, master="localhost")
    done = _entry(["train.py"], {**plain, **layout}, tmp_path)
    assert (done.returncode, done.stderr.strip()) == (1, NO_HOROVOD)


def test_rank_0_says_in_one_line_when_its_port_is_taken(tmp_path: Path, horovod_src: str) -> None:
    (tmp_path / "train.py").write_text("raise SystemExit('the script must not run')\n")
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**_rank_env(horovod_src, port), **_torchrun_layout(rank=0, nodes=1, per_node=2)}
        done = _entry(["train.py"], env, tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().startswith(
        f"horovod_entry.py: Horovod's rendezvous server cannot listen on port {port}:"
    )
    assert done.stderr.strip().endswith("set another with --env HOROVOD_GLOO_RENDEZVOUS_PORT=<port>")


@pytest.fixture
def rendezvous(horovod_src: str, tmp_path: Path) -> Iterator[str]:
    """Rank 0's server for 2 nodes of 2 ranks, started by the entry's own function in a process
    of its own (the entry imported from its file, as in a pod); its base URL."""
    port = _free_port()
    env = {
        **horovod_env(_torchrun_layout(rank=0, nodes=2, per_node=2)),
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
    }
    # Loaded from its file, not by module name: this test's path must not make horovod ours.
    code = (
        "import importlib.util as u, time; "
        f"s = u.spec_from_file_location('horovod_entry', {str(ENTRY)!r}); m = u.module_from_spec(s); "
        f"s.loader.exec_module(m); m.start_rendezvous({env!r}); print('serving', flush=True); time.sleep(300)"
    )
    pythonpath = {**os.environ, "PYTHONPATH": horovod_src}
    server = subprocess.Popen(
        [sys.executable, "-c", code], env=pythonpath, cwd=tmp_path, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "serving"
        assert horovod_entry.wait_for_rendezvous("127.0.0.1", port, timeout=30)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


def _http(method: str, url: str, body: bytes | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, method=method), timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, b""


def test_rank_0s_server_keeps_a_scope_until_all_its_ranks_are_done(rendezvous: str) -> None:
    """The host plan the server got names the scopes as the ranks do: a node's scope holds its
    keys until both of its ranks finalized (a scope the plan does not know loses a key at once)."""
    assert _http("GET", f"{rendezvous}/local_node-1/0") == (404, b"")
    for rank in (0, 1):
        assert _http("PUT", f"{rendezvous}/local_node-1/{rank}", f"addr-{rank}".encode())[0] == 200
    assert _http("GET", f"{rendezvous}/local_node-1/1") == (200, b"addr-1")
    assert _http("DELETE", f"{rendezvous}/local_node-1/0")[0] == 200
    assert _http("GET", f"{rendezvous}/local_node-1/0") == (200, b"addr-0")  # rank 1 may still read it
    assert _http("DELETE", f"{rendezvous}/local_node-1/1")[0] == 200
    assert _http("GET", f"{rendezvous}/local_node-1/0") == (404, b"")  # done: cleared
    assert _http("PUT", f"{rendezvous}/local_pod-x/0", b"x")[0] == 200
    assert _http("DELETE", f"{rendezvous}/local_pod-x/0")[0] == 200
    assert _http("GET", f"{rendezvous}/local_pod-x/0") == (404, b"")


def test_the_entry_ships_self_contained() -> None:
    """It runs in the user's image: the standard library and horovod only, nothing of ours."""
    tree = ast.parse(ENTRY.read_text())
    imported = {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert imported - {"horovod", "__future__"} <= set(sys.stdlib_module_names), imported


# Starts the servers horovodrun starts (the gloo rendezvous store, a driver/task service) with
# Horovod's own code, after the local agent's module (argv[1]) bound them to loopback or not.
SERVERS_BIND = """
import json, sys
if sys.argv[1] == "ours":
    from jupyter_disttrain.launchers.horovod_local import bind_to_loopback
    bind_to_loopback()
from horovod.runner.common.util.network import BasicService
from horovod.runner.http.http_server import RendezvousServer
rendezvous = RendezvousServer()
rendezvous.start()
service = BasicService("driver", b"0" * 32, nics=None)
print(json.dumps([rendezvous._httpd.server_address[0], service._server.server_address[0]]))
rendezvous.stop()
service.shutdown()
"""


@pytest.mark.parametrize(("how", "address"), [("horovod", "0.0.0.0"), ("ours", "127.0.0.1")])
def test_a_local_horovodrun_serves_on_loopback_only(horovod_src: str, how: str, address: str) -> None:
    """Horovod's runner binds its servers on every interface (``find_port`` binds ``''``); the
    local agent's module (``launchers.horovod_local``) binds them to 127.0.0.1."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([horovod_src, *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", SERVERS_BIND, how],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [address, address]
