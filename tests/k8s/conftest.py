"""Fixtures: a toy cluster (fake API server + controllers + process kubelet) and a workspace
directory that plays the shared PVC, mounted at the same path in the "notebook" and the pods."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.kubernetes.informer import stop_all
from jupyter_disttrain.model.specs import JobSpec, JobStatus, Volume
from jupyter_disttrain.storage.store import JobStore

from .toycluster import ToyCluster

DDP_SCRIPT = """\
import os, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
print(f"rank {rank}/{world} sum={t.item():.0f} job={os.environ['DISTTRAIN_JOB_ID']}")
print(f"tb={os.environ['DISTTRAIN_TENSORBOARD_DIR']} cwd={os.getcwd()}")
dist.destroy_process_group()
sys.exit(int(os.environ.get("FAIL_RANK", "-1")) == rank and 3 or 0)
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "project").mkdir(parents=True)
    return ws


def start_toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **kw: Any) -> Iterator[ToyCluster]:
    toy = ToyCluster(**kw)
    _current.append(toy)
    with toy:
        cfg = tmp_path / "kubeconfig"
        cfg.write_text(yaml.safe_dump(toy.server.kubeconfig()))
        monkeypatch.setenv("KUBECONFIG", str(cfg))
        for var in ("KUBERNETES_SERVICE_HOST", "POD_NAME", "POD_NAMESPACE"):
            monkeypatch.delenv(var, raising=False)
        try:
            yield toy
        finally:
            stop_all()
            _current.remove(toy)


_current: list[ToyCluster] = []


def _diagnose() -> str:
    from jupyter_disttrain.backends.kubernetes.informer import all_informers

    out = []
    for toy in _current:
        for p in toy.cluster.items("/v1/pods"):
            out.append(
                f"pod {p['metadata']['name']} {p['status'].get('phase')} "
                f"rv={p['metadata']['resourceVersion']}"
            )
        for (_, pod), log in toy.cluster.logs.items():
            out.append(f"log {pod}: {[ln[1][-120:] for ln in log.lines[-4:]]} closed={log.closed}")
        out.append(f"cluster rv={toy.cluster.rv}")
    for inf in all_informers():
        out.append(
            f"informer {inf.res.plural} rv={inf.resource_version} lists={inf.lists} "
            f"watches={inf.watches} err={inf.last_error!r}"
        )
    return "\n".join(out)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ToyCluster]:
    yield from start_toy(monkeypatch, tmp_path)


@pytest.fixture
def toy_kubeflow(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ToyCluster]:
    yield from start_toy(monkeypatch, tmp_path, install=("pytorchjob",))


@pytest.fixture
def kueue_kubeflow(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ToyCluster]:
    """The training operator, and Kueue's webhook suspending queued workloads (``kueue_admit``)."""
    yield from start_toy(monkeypatch, tmp_path, install=("pytorchjob",), kueue=True)


@pytest.fixture
def backend(workspace: Path) -> KubernetesBackend:
    return KubernetesBackend(JobStore(workspace / ".disttrain" / "jobs"))


def ddp_spec(workspace: Path, **kw: Any) -> JobSpec:
    options = {"namespace": "team-a", **kw.pop("options", {})}
    base: dict[str, Any] = dict(
        name="ddp",
        backend="kubernetes",
        nodes=2,
        nproc_per_node=1,
        image="pytorch:local",
        volumes=[Volume("workspace", str(workspace))],
        working_dir=str(workspace / "project"),
        options=options,
    )
    base.update(kw)
    return JobSpec(**base)


def wait_for(
    backend: KubernetesBackend, job_id: str, test: Callable[[JobStatus], bool], timeout: float = 120
) -> JobStatus:
    """Poll describe() until ``test`` holds (the timeout only stops a hung test)."""
    deadline = time.monotonic() + timeout
    while True:
        status = backend.describe(job_id)
        if test(status):
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"condition never held; last status: {status.to_dict()}\n{_diagnose()}")
        time.sleep(0.1)
