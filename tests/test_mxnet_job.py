"""``--launcher mxnet``: parameter-server jobs (a scheduler, servers, workers), laid out by a dry
run and run for real with MXNet 1.9.1 in its own venv (``mxnet_python``), from a real kernel
that has no MXNet: the cell is packaged as text, ``import mxnet`` runs in the job's interpreter."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from jupyter_disttrain import api
from jupyter_disttrain.backends.rankenv import runtime_path
from jupyter_disttrain.launchers.base import Role
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.runtime import contract
from jupyter_disttrain.storage.store import JobStore

# Each worker pushes (rank + 1) * ones(2, 3); dist_sync sums the pushes, so both pull 3 * 6 = 18.
KV_CELL = """
import mxnet as mx
kv = mx.kv.create("dist_sync")
kv.init(3, mx.nd.zeros(SHAPE))
kv.push(3, mx.nd.ones(SHAPE) * (kv.rank + 1))
out = mx.nd.zeros(SHAPE)
kv.pull(3, out=out)
print(f"worker {kv.rank} of {kv.num_workers} pulled {out.asnumpy().sum():.0f}")
"""
REPLICAS = ["scheduler", "server-0", "worker-0", "worker-1"]
TWO = {"workers": 2}


def _ps(store: JobStore, **extra: object) -> dict[str, object]:
    fields: dict[str, object] = {"launcher": "mxnet", "accelerator": "cpu"}
    fields["launcher_options"] = {"servers": 1, "workers": 2}
    return {"store": store, **fields, **extra}


def test_a_dry_run_lays_out_a_scheduler_servers_and_workers_on_loopback(store: JobStore) -> None:
    info = api.dryrun("print(1)", **_ps(store))  # type: ignore[arg-type]
    roles = [Role.from_json(r) for r in info.request.to_json()["roles"]]
    assert [(r.name, r.replicas, r.via) for r in roles] == [
        ("scheduler", 1, "process"),
        ("server", 1, "process"),
        ("worker", 2, "process"),
    ]
    agents = info.request.to_json()["agents"]
    assert [a["replica"] for a in agents] == REPLICAS
    port = agents[0]["env"]["DMLC_PS_ROOT_PORT"]
    for agent, role in zip(agents, ["scheduler", "server", "worker", "worker"], strict=True):
        env = agent["env"]
        assert env["DMLC_ROLE"] == role and env[contract.REPLICA_ENV] == agent["replica"]
        assert env["DMLC_PS_ROOT_URI"] == env["DMLC_NODE_HOST"] == "127.0.0.1"
        assert (env["DMLC_PS_ROOT_PORT"], env["DMLC_NUM_SERVER"], env["DMLC_NUM_WORKER"]) == (port, "1", "2")
        assert agent["argv"][1:3] == ["-m", "jupyter_disttrain.runtime.worker"]
    assert "DMLC_ROLE=scheduler" in info.text and 'export DMLC_PS_ROOT_PORT="$port"' in info.text


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        (
            {"launcher_options": {"servers": 0, "workers": 2}},
            "--servers must be a whole number of at least 1",
        ),
        ({"launcher_options": {"servers": 1}}, "--launcher mxnet needs --workers W"),
        ({"launcher_options": {"workers": 2}, "nodes": 2}, "leave out --nodes"),
        ({"launcher_options": {"workers": 2}, "options": {"python": "venv/bin/python"}}, "absolute path"),
        (
            {"launcher_options": {"workers": 2}, "options": {"python": "/no/such/python"}},
            "no such executable",
        ),
    ],
)
def test_bad_input_is_one_line_and_launches_nothing(
    store: JobStore, fields: dict[str, object], words: str
) -> None:
    with pytest.raises(InvalidSpecError) as err:
        api.submit("print(1)", store=store, launcher="mxnet", accelerator="cpu", **fields)  # type: ignore[arg-type]
    assert words in str(err.value) and "\n" not in str(err.value)
    assert store.records() == []


def _listening(job_id: str) -> set[str]:
    """The addresses the job's processes listen on."""
    from jupyter_disttrain.storage import procs

    found = set()
    for proc in procs.job_processes(job_id):
        try:
            conns = proc.net_connections(kind="tcp")
        except psutil.Error:
            continue
        found |= {c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN}
    return found


def test_dist_sync_workers_pull_the_sum_and_listen_on_loopback_only(
    store: JobStore, mxnet_python: str, tmp_path: Path
) -> None:
    # The workers stay up a while after the pull, so their sockets can be looked at.
    script = "SHAPE = (2, 3)\n" + KV_CELL + "import time\ntime.sleep(3)\n"
    job = api.submit(script, **_ps(store, options={"python": mxnet_python}))  # type: ignore[arg-type]
    listening: set[str] = set()
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and not job.status().is_terminal:
        listening |= _listening(job.id)
        time.sleep(0.3)
    status = job.wait(timeout=30)
    lines = {(ln.replica, ln.text) for ln in job.logs()}
    assert status.phase is JobPhase.SUCCEEDED, (status.message, sorted(lines))
    # ps-lite numbers the workers as they reach the scheduler, not by replica name.
    pulled = sorted(text for replica, text in lines if replica.startswith("worker-"))
    assert pulled == ["worker 0 of 2 pulled 18", "worker 1 of 2 pulled 18"]
    assert [(r.name, r.role, r.phase) for r in status.replicas] == [
        (name, name.split("-")[0], JobPhase.SUCCEEDED) for name in REPLICAS
    ]
    assert listening and listening <= {"127.0.0.1"}, listening


def test_a_failed_worker_fails_the_job_and_stops_the_others(store: JobStore, mxnet_python: str) -> None:
    script = "SHAPE = (2,)\nimport mxnet as mx\nkv = mx.kv.create('dist_sync')\n" + (
        "if kv.rank == 1:\n    raise RuntimeError('worker one gives up')\n" + KV_CELL.split("\n", 2)[2]
    )
    job = api.submit(script, **_ps(store, options={"python": mxnet_python}))  # type: ignore[arg-type]
    status = job.wait(timeout=150)
    assert status.phase is JobPhase.FAILED and status.message
    # Whichever replica ps-lite numbered 1 is the one that failed.
    assert re.match(r"worker-[01] exited with code 1: RuntimeError: worker one gives up", status.message)
    assert list(job.dir.glob("logs/*.log")) and not list(_alive(job.id))


def _alive(job_id: str) -> list[psutil.Process]:
    from jupyter_disttrain.storage import procs

    return list(procs.job_processes(job_id))


def test_cancel_stops_every_role(store: JobStore, mxnet_python: str) -> None:
    script = "SHAPE = (2,)\n" + KV_CELL + "import time\ntime.sleep(600)\n"
    job = api.submit(script, **_ps(store, options={"python": mxnet_python}))  # type: ignore[arg-type]
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        if any("pulled" in ln.text for ln in job.logs()):
            break
        time.sleep(0.3)
    job.cancel()
    status = job.wait(timeout=60)
    assert status.phase is JobPhase.CANCELLED
    assert not _alive(job.id)


CELLS = [
    "%load_ext jupyter_disttrain",
    "SHAPE = (2, 3)  # an earlier cell's value travels with the script",
]


def test_a_dist_sync_cell_in_a_real_kernel_without_mxnet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mxnet_python: str
) -> None:
    root = tmp_path / "jobs"
    monkeypatch.setenv("DISTTRAIN_JOB_ROOT", str(root))  # the kernel inherits it
    magic = f"%%distrun --launcher mxnet --servers 1 --workers 2 --python {mxnet_python} --name ps\n"
    nb = new_notebook(cells=[new_code_cell(c) for c in [*CELLS, magic + KV_CELL.lstrip()]])
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    (record,) = JobStore(root).records()
    job = api.get_job(record.id, JobStore(root))
    status = job.status()
    assert status.phase is JobPhase.SUCCEEDED, status.message
    texts = sorted(ln.text for ln in job.logs() if ln.replica.startswith("worker"))
    assert texts == ["worker 0 of 2 pulled 18", "worker 1 of 2 pulled 18"]
    assert "SHAPE = (2, 3)" in job.script
    shown = nbformat.writes(nb)  # the cell's output
    assert "Succeeded" in shown and "worker 1 of 2 pulled 18" in shown
    assert sys.executable not in " ".join(record.request["agents"][0]["argv"])


def test_another_python_gets_the_wrapper_and_none_of_the_kernels_installation(
    store: JobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    venv_python = home / "venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(sys.executable)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    kernels = os.path.join(sys.prefix, "lib", "site-packages")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([kernels, "/elsewhere"]))
    info = api.dryrun("print(1)", **_ps(store, options={"python": "~/venv/bin/python"}))  # type: ignore[arg-type]
    agent = info.request.to_json()["agents"][0]
    assert agent["argv"][0] == str(venv_python)
    entries = agent["env"]["PYTHONPATH"].split(os.pathsep)
    runtime = runtime_path(info.request.to_json()["cache_dir"])
    assert entries[-1] == runtime and "/elsewhere" in entries and kernels not in entries
    assert runtime.startswith(str(home))
