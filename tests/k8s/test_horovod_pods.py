"""``--launcher horovod --backend kubernetes``: torchrun pods on Horovod's entry program.

Dry runs of every flavour, validated offline against the real schemas; and a job run on the toy
cluster whose image has Horovod 0.28.1's runner on its ``PYTHONPATH`` (its source release, see
``tests/test_horovod_entry.py``; Horovod's C++ part does not build against torch 2.x here), its
ranks meeting at rank 0's rendezvous server as ``hvd.init()`` would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.launchers import horovod_entry
from jupyter_disttrain.launchers.base import TORCHRUN, Role
from jupyter_disttrain.model.specs import JobPhase, Volume
from jupyter_disttrain.storage.store import JobStore
from tests.test_horovod_entry import RANK_SCRIPT, _free_port, horovod_src  # noqa: F401  (fixture)

from .conftest import ddp_spec, start_toy, wait_for
from .schema_check import schema_errors, semantic_errors
from .test_launchers import _containers, _script_and_args
from .test_manifests import FLAVORS, make_spec

ENTRY_SOURCE = Path(horovod_entry.__file__).read_text()
SCRIPT = "import horovod.torch as hvd\nhvd.init()\n"


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))  # a dry run needs none
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@pytest.fixture
def dry_backend(tmp_path: Path, no_cluster: None) -> KubernetesBackend:
    return KubernetesBackend(JobStore(tmp_path / "ws" / ".disttrain" / "jobs"))


def _torchrun_words(container: dict) -> list[str]:
    """torchrun's own words in the pod (T9k's controller writes them from its torchrunConfig)."""
    if "args" in container:
        return []
    command = container["command"]
    return command[command.index("torchrun") : command.index("torchrun") + 3]


@pytest.mark.parametrize("version", ["1.27", "1.33"])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_pod_runs_torchrun_on_the_entry_program(
    dry_backend: KubernetesBackend, tmp_path: Path, flavor: str, version: str
) -> None:
    spec = make_spec(tmp_path, flavor, version, launcher="horovod")  # 3 nodes of 4 ranks
    info = dry_backend.dryrun(spec, job_id="hvd-mnist-ab12c", script=SCRIPT)
    job_dir = str(tmp_path / "ws" / ".disttrain" / "jobs" / "hvd-mnist-ab12c")  # on the shared PVC
    for obj in info.request.manifests:
        assert semantic_errors(obj) == [], obj["kind"]
        if obj["kind"] != "PyTorchTrainingJob":  # T9k publishes no CRD: semantic checks only
            assert schema_errors(obj, version) == [], obj["kind"]
    containers = _containers(info.request.manifests)
    assert containers
    for c in containers:
        assert _torchrun_words(c) in ([], ["torchrun", "--tee", "3"])
        assert _script_and_args(c) == [f"{job_dir}/horovod_entry.py", f"{job_dir}/train.py", "--epochs", "1"]
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["HOROVOD_GLOO_RENDEZVOUS_PORT"] == "29501"  # beside torch's MASTER_PORT
    (role,) = [Role.from_json(r) for r in info.request.roles]
    assert (role.via, role.replicas, role.entry) == (TORCHRUN, 12, f"{job_dir}/horovod_entry.py")


def test_without_a_shared_volume_the_entry_ships_in_the_configmap(
    dry_backend: KubernetesBackend, tmp_path: Path
) -> None:
    spec = make_spec(
        tmp_path, "job", launcher="horovod", volumes=[Volume("datasets", "/data", read_only=True)]
    )
    info = dry_backend.dryrun(spec, job_id="hvd-mnist-ab12c", script=SCRIPT)
    cm = info.request.manifests[0]
    assert cm["kind"] == "ConfigMap"
    assert cm["data"]["horovod_entry.py"] == ENTRY_SOURCE and cm["data"]["train.py"] == SCRIPT
    (c,) = _containers(info.request.manifests)
    assert _script_and_args(c) == [
        "/disttrain/code/horovod_entry.py",
        "/disttrain/code/train.py",
        "--epochs",
        "1",
    ]
    for obj in info.request.manifests:
        assert schema_errors(obj, "1.33") == [] and semantic_errors(obj) == []


def test_old_records_roles_have_no_entry() -> None:
    old = {
        "name": "worker",
        "replicas": 2,
        "args": ["--lr", "1"],
        "env": {},
        "via": "torchrun",
        "single": False,
    }
    assert Role.from_json(old).entry is None
    role = Role("worker", 2, ["/j/train.py"], entry="/j/horovod_entry.py")
    assert Role.from_json(json.loads(json.dumps(role.to_json()))) == role


@pytest.fixture
def horovod_image(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    horovod_src: str,  # noqa: F811
) -> Iterator[str]:
    """The toy cluster with the flavour ``request.param`` installed, its image ``pytorch:local``
    with Horovod's runner on its PYTHONPATH; the flavour."""
    image_env = {"pytorch:local": {"PYTHONPATH": horovod_src}}
    install = () if request.param == "job" else (request.param,)
    for _ in start_toy(monkeypatch, tmp_path, install=install, image_env=image_env):
        yield request.param


@pytest.mark.parametrize("horovod_image", ["job", "t9k"], indirect=True)
def test_a_horovod_job_meets_at_rank_0s_rendezvous_on_the_toy_cluster(
    horovod_image: str, workspace: Path
) -> None:
    backend = KubernetesBackend(JobStore(workspace / ".disttrain" / "jobs"))
    out = workspace / "out"
    out.mkdir()
    # The port is the user's (a fixed one could meet another test's); gloo's interface is loopback.
    env = {"HOROVOD_GLOO_RENDEZVOUS_PORT": str(_free_port()), "GLOO_SOCKET_IFNAME": "lo"}
    spec = ddp_spec(
        workspace,
        launcher="horovod",
        nodes=2,
        nproc_per_node=2,
        args=[str(out)],
        env=env,
        options={"flavor": horovod_image},
    )
    job_id = backend.submit(spec, RANK_SCRIPT)
    status = wait_for(backend, job_id, lambda s: s.is_terminal, timeout=180)
    lines = [ln.text for ln in backend.logs(job_id)]
    assert status.phase is JobPhase.SUCCEEDED, (status.message, lines[-30:])
    records = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(4)]
    for rank, record in enumerate(records):
        env = record["env"]
        assert {k: env.get(k) for k in record["horovodrun"]} == record["horovodrun"]
        assert record["views"] == {
            "global": [0, 1, 2, 3],
            "local": [rank // 2 * 2, rank // 2 * 2 + 1],
            "cross": [rank % 2, 2 + rank % 2],
        }
        assert env["DISTTRAIN_JOB_ID"] == job_id  # the rank contract holds under the entry too
    assert len(status.replicas) == 2  # a pod per node
