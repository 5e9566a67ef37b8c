"""Shared fixtures. pytest-jupyter's server fixtures (``jp_fetch``, ``jp_serverapp``) are
loaded here: pytest takes plugins only from the top-level conftest."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain.backends.warm import plan as warm
from jupyter_disttrain.storage.store import JobStore
from tests.slurm.cluster import SlurmCluster, missing
from tests.venvs import MXNET_CHECK, MXNET_REQUIREMENTS, VenvUnavailable, ensure_venv

pytest_plugins = ("pytest_jupyter.jupyter_server",)


@pytest.fixture(scope="session", autouse=True)
def _session_jupyter_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Module-scoped fixtures make jobs too: they record their roots here, not for the user."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_DATA_DIR", str(tmp_path_factory.mktemp("session-jupyter-data")))
        yield


@pytest.fixture(scope="session", autouse=True)
def zygote_dir() -> Iterator[Path]:
    """The warm zygotes of this test session live in a runtime dir of its own (a short path: it
    holds their Unix sockets), which kernels and servers started by the tests inherit, and end
    with the session."""
    runtime = tempfile.mkdtemp(prefix="dt-run-")  # 0700
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_RUNTIME_DIR", runtime)
        yield warm.zygote_dir()
        warm.stop(Path(runtime, "jupyter_disttrain"))
    shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture(params=["warm", "cold"])
def start_path(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, store: JobStore
) -> Iterator[str]:
    """Run the test on both of the local backend's paths: ranks forked from the warm zygote, and
    torchrun afresh. On the warm one, every job that was to run warm must have (a silent fall back
    to cold would leave the warm half testing nothing)."""
    monkeypatch.setenv(warm.WARM_ENV, "1" if request.param == "warm" else "0")
    yield request.param
    if request.param != "warm" or not store.root.exists():
        return
    for record in store.records():
        if record.spec.backend != "local" or not record.request.get("warm"):
            continue
        status = store.read_status(record.id)
        started = [e.message for e in (status.events if status else []) if e.reason == "Started"]
        assert all("(warm:" in m for m in started), (record.id, started)


@pytest.fixture(autouse=True)
def jupyter_data_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's own Jupyter data dir: the index of job roots is never the user's real one
    (subprocesses, kernels and servers inherit it)."""
    data_dir = tmp_path_factory.mktemp("jupyter-data")
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data_dir))
    return data_dir


@pytest.fixture
def store(tmp_path: Path) -> JobStore:
    return JobStore(tmp_path / "jobs")


@pytest.fixture
def write_script(tmp_path: Path):
    """Write a dedented script into tmp_path and return its text."""

    def make(source: str) -> str:
        return textwrap.dedent(source).lstrip()

    return make


PYTHON = sys.executable


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    """A real IPython shell (real ``In`` history and namespace), reset around each test."""
    ip = InteractiveShell.instance()
    ip.reset(new_session=True)
    yield ip
    ip.reset(new_session=True)


@pytest.fixture(scope="session")
def mxnet_python() -> str:
    """The interpreter of a cached venv with MXNet 1.9.1 (``tests/venvs.py``); skips the test,
    with the reason, where that venv cannot be built."""
    try:
        return str(ensure_venv("mxnet-1.9.1", MXNET_REQUIREMENTS, MXNET_CHECK))
    except VenvUnavailable as exc:
        pytest.skip(f"no MXNet venv: {exc}")


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """The slurm group's cluster: two nodes of a real Slurm on this machine, started once for the
    session in a directory of its own (``tests/slurm/cluster.py``), found by every client, kernel
    and server of the tests through ``SLURM_CONF``, and stopped at the end. Without Slurm (or
    root) its tests are skipped with the reason, unless ``DISTTRAIN_REQUIRE_SLURM`` is set
    (``scripts/test.sh`` sets it after installing Slurm): then they fail."""
    why = missing()
    if why:
        if os.environ.get("DISTTRAIN_REQUIRE_SLURM"):
            pytest.fail(f"no Slurm cluster can start: {why}")
        pytest.skip(f"no Slurm cluster can start: {why}")
    cluster = SlurmCluster()
    with pytest.MonkeyPatch.context() as mp:
        for key, value in cluster.env.items():
            mp.setenv(key, value)
        # A kernel started by a test must not think it runs inside an allocation of ours.
        for key in [k for k in os.environ if k.startswith(("SLURM_JOB_", "SLURM_NNODES", "SLURM_STEP_"))]:
            mp.delenv(key)
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.stop()
