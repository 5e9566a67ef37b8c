"""``--launcher horovod`` is tested by what it produces: Horovod 0.28.1 does not build against
torch 2.13 here (README), so no real run (its pods on Kubernetes: ``tests/k8s/test_horovod_pods.py``).
Plus the parameter-server and Horovod launchers' bad input through ``%%distrun`` itself: one
line, nothing launched."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain.backends.local.roles import role_commands
from jupyter_disttrain.launchers import get_launcher
from jupyter_disttrain.launchers.base import HOROVODRUN, LaunchContext, replicas_of
from jupyter_disttrain.model.specs import JobSpec
from jupyter_disttrain.runtime import contract
from tests.test_magic import _jobs, shell  # noqa: F401  (the magic's shell fixture)

HOROVOD_MISSING = importlib.util.find_spec("horovod") is None


def test_horovodrun_runs_the_ranks_with_gloo_on_loopback(tmp_path: Path) -> None:
    spec = JobSpec(name="hvd", nproc_per_node=2, accelerator="cpu", launcher="horovod", args=["--lr", "0.1"])
    (role,) = get_launcher("horovod").roles(spec, LaunchContext(str(tmp_path), True))
    assert role.via == HOROVODRUN
    assert [name for name, _, _ in replicas_of([role])] == ["rank-0", "rank-1"]
    job_dir = str(tmp_path / "hvd-00000")
    (agent,) = role_commands(spec, "hvd-00000", job_dir, role, python="/py", gpu_ids=None, working_dir="/nb")
    script = os.path.join(job_dir, "train.py")
    assert agent.argv == [
        "/py", "-m", "jupyter_disttrain.launchers.horovod_local", "-np", "2", "-H", "localhost:2", "--gloo",
        "--network-interfaces", "lo",
        "/py", "-m", "jupyter_disttrain.runtime.worker", script, "--lr", "0.1",
    ]  # fmt: skip
    assert agent.replica is None  # an agent: its ranks write rank-N.log, it writes agent-0.log
    env = agent.env
    assert env[contract.JOB_ID_ENV] == "hvd-00000" and env[contract.NODE_ENV] == "0"
    assert env[contract.LOG_DIR_ENV] == os.path.join(job_dir, "logs")
    assert env["GLOO_SOCKET_IFNAME"] == "lo" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["PYTHONPATH"].split(os.pathsep)[0] == "/nb"


MAGIC_BAD_INPUT = [
    ("--launcher mxnet --servers 0 --workers 2", "--servers must be a whole number of at least 1"),
    ("--launcher mxnet", "--launcher mxnet needs --workers W"),
    ("--servers 2", "--launcher mxnet needs --workers W"),  # a launcher's own flag picks it
    ("--launcher horovod --nodes 2", "Horovod reaches other nodes over SSH"),
    (  # a pod per replica: plain Jobs, not an operator's torchrun replica types
        "--workers 2 --backend kubernetes --image python:3.11 --flavor pytorchjob --dry-run",
        "which the pytorchjob flavour's operator does not: use --flavor job",
    ),
]


@pytest.mark.parametrize(("line", "expected"), MAGIC_BAD_INPUT)
def test_bad_launcher_input_is_one_line_and_launches_nothing(
    shell: InteractiveShell,  # noqa: F811
    tmp_path: Path,
    line: str,
    expected: str,
) -> None:
    with pytest.raises(UsageError) as err:
        shell.run_cell_magic("distrun", line, "x = 1\n")
    assert expected in str(err.value) and "\n" not in str(err.value).strip()
    assert _jobs(tmp_path) == []


@pytest.mark.skipif(not HOROVOD_MISSING, reason="horovod is installed here")
def test_horovod_is_refused_when_it_is_not_importable(shell: InteractiveShell, tmp_path: Path) -> None:  # noqa: F811
    with pytest.raises(UsageError, match=r"--launcher horovod needs horovod, which is not importable here"):
        shell.run_cell_magic("distrun", "--launcher horovod --gpus 2", "import horovod.torch as hvd\n")
    assert _jobs(tmp_path) == []


@pytest.fixture
def kube_dry_run(
    shell: InteractiveShell,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Callable[[str, str], str]:
    """``%%distrun <line> --dry-run`` on Kubernetes with no cluster: what it prints (and it
    launched nothing)."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    def run(line: str, cell: str) -> str:
        shell.run_cell_magic("distrun", f"{line} --backend kubernetes --dry-run", cell)
        assert _jobs(tmp_path) == []
        return capsys.readouterr().out

    return run


@pytest.mark.skipif(not HOROVOD_MISSING, reason="horovod is installed here")
def test_horovod_on_kubernetes_needs_no_horovod_here(kube_dry_run: Callable[[str, str], str]) -> None:
    """Horovod is the image's: the dry run of a two-node job shows its pods and the entry program
    among the side files."""
    line = "--launcher horovod --flavor job --image python:3.11 --nodes 2"
    out = kube_dry_run(line, "import horovod.torch as hvd\nhvd.init()\n")
    assert "# side file: horovod_entry.py (" in out and "from the horovod launcher" in out
    assert "/disttrain/code/horovod_entry.py" in out and "HOROVOD_GLOO_RENDEZVOUS_PORT" in out


def test_mxnet_on_kubernetes_from_the_magic_lays_out_a_pod_per_replica(
    kube_dry_run: Callable[[str, str], str],
) -> None:
    """No --flavor and no cluster: a parameter-server job is plain Jobs, nothing to discover."""
    out = kube_dry_run("--workers 2 --image mxnet:1.9.1 --name ps", "import mxnet as mx\n")
    assert "flavor job" in out and out.count("kind: Job\n") == 3 and "DMLC_USE_KUBERNETES" in out
    assert "-scheduler-0.ps-" in out  # DMLC_PS_ROOT_URI: the scheduler pod behind the Service
