"""Images whose Python is not called ``python``: the pod finds the image's interpreter as torchrun
is found, and an image without one (or without torchrun) fails with a status that says so."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.model.specs import JobPhase

from .conftest import DDP_SCRIPT, ddp_spec, start_toy, wait_for
from .toycluster import ToyCluster

TORCHRUN = shutil.which("torchrun", path=os.path.dirname(sys.executable))


def bin_dir(root: Path, name: str, *tools: tuple[str, str]) -> str:
    """A PATH of one directory holding just ``tools`` (name, target) as symlinks."""
    path = root / name
    path.mkdir()
    for tool, target in tools:
        (path / tool).symlink_to(target)
    return str(path)


@pytest.fixture
def images_toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ToyCluster]:
    assert TORCHRUN is not None
    paths = {
        # torchrun only, its "#!" line naming an interpreter that is on no PATH
        "slim:torchrun-only": bin_dir(tmp_path, "a", ("torchrun", TORCHRUN)),
        # Python but no PyTorch
        "python:3-slim": bin_dir(tmp_path, "b", ("python3", sys.executable)),
        "busybox": bin_dir(tmp_path, "c"),
    }
    yield from start_toy(monkeypatch, tmp_path, image_paths=paths)


def test_python_is_found_through_torchrun(
    images_toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    spec = ddp_spec(workspace, image="slim:torchrun-only", options={"flavor": "job"})
    job_id = backend.submit(spec, DDP_SCRIPT)
    status = wait_for(backend, job_id, lambda s: s.is_terminal)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    assert any(" sum=3 " in ln.text for ln in backend.logs(job_id))


@pytest.mark.parametrize(
    ("image", "says"),
    [
        (
            "python:3-slim",
            "jupyter-disttrain: torchrun is not on PATH in this image; use an image with PyTorch",
        ),
        ("busybox", "jupyter-disttrain: this image has no python3 or python on PATH"),
    ],
)
def test_an_image_without_python_or_torchrun_says_so(
    images_toy: ToyCluster, backend: KubernetesBackend, workspace: Path, image: str, says: str
) -> None:
    job_id = backend.submit(ddp_spec(workspace, image=image, nodes=1, options={"flavor": "job"}), DDP_SCRIPT)
    status = wait_for(backend, job_id, lambda s: s.is_terminal)
    assert status.phase is JobPhase.FAILED
    (node0,) = status.replicas
    assert node0.exit_code == 127 and says in (node0.message or ""), node0
    assert says in (status.message or "")
