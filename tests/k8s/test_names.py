"""Job names against the API server's rules: Services and PyTorchJobs are DNS-1035 labels (start
with a letter), pod hostnames DNS-1123 labels of at most 63 characters. A name the cluster would
refuse is refused before anything is created, with a one-line error."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.kubernetes.client import SERVICES, ApiError, KubeClient
from jupyter_disttrain.backends.kubernetes.flavors import flavor_named
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import MAX_NAME_LEN, JobPhase

from .conftest import ddp_spec, wait_for
from .schema_check import semantic_errors
from .toycluster import PODS, ToyCluster

QUICK = "import os\nprint('host', os.environ['HOSTNAME'])\n"


@pytest.mark.parametrize(
    ("kind", "spec", "fragment"),
    [
        (
            "Service",
            {"clusterIP": "None"},
            'metadata.name: Invalid value: "7b-llama-ab12c": a DNS-1035 label',
        ),
        ("Pod", {"hostname": "h" * 64, "containers": []}, "spec.hostname: Invalid value"),
    ],
)
def test_the_fake_api_refuses_what_the_api_server_refuses(
    toy: ToyCluster, kind: str, spec: dict, fragment: str
) -> None:
    client = KubeClient.from_environment()
    assert client is not None
    obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "7b-llama-ab12c", "namespace": "team-a"}}
    with pytest.raises(ApiError) as err:
        client.create({**obj, "spec": spec})
    assert err.value.status == 422 and fragment in str(err.value)
    assert client.get(SERVICES, "team-a", "7b-llama-ab12c") is None


@pytest.mark.parametrize("flavor", ["job", "pytorchjob"])
def test_a_name_starting_with_a_digit_is_refused_before_creating_anything(
    toy_kubeflow: ToyCluster, backend: KubernetesBackend, workspace: Path, flavor: str
) -> None:
    spec = ddp_spec(workspace, name="7b-llama", options={"flavor": flavor})
    with pytest.raises(InvalidSpecError) as err:
        backend.submit(spec, QUICK)
    assert str(err.value) == (
        "--name '7b-llama': Kubernetes Service and PyTorchJob names must start with a letter; "
        "use e.g. --name run-7b-llama"
    )
    assert toy_kubeflow.cluster.count("POST") == 0 and not backend.store.ids()


def test_63_character_job_ids(backend: KubernetesBackend, workspace: Path) -> None:
    """A job id may be 63 characters, but the Indexed Job's hostnames add ``-<index>``."""
    spec = ddp_spec(workspace, options={"flavor": "job", "k8s_version": "1.33"})
    job_id = "a" * 57 + "-b12cd"
    with pytest.raises(InvalidSpecError) as err:
        backend.dryrun(spec, job_id=job_id)
    assert f"pod hostname '{job_id}-1' has 65 characters, over 63" in str(err.value)
    assert "\n" not in str(err.value)
    fits = "a" * 55 + "-b12cd"  # 61 + "-1": a hostname of exactly 63
    for obj in backend.dryrun(spec, job_id=fits).request.manifests:
        assert semantic_errors(obj) == []
    assert flavor_named("job").last_hostname(fits, spec) == f"{fits}-1" and len(f"{fits}-1") == 63
    for flavor in ("pytorchjob", "t9k"):  # <job>-worker-<i>: 7 more characters than the Job's
        spec.options["flavor"] = flavor
        with pytest.raises(InvalidSpecError, match="over 63"):
            backend.dryrun(spec, job_id=fits)


@pytest.mark.parametrize("flavor", ["job", "pytorchjob"])
def test_the_longest_name_runs(
    toy_kubeflow: ToyCluster, backend: KubernetesBackend, workspace: Path, flavor: str
) -> None:
    """A --name of the maximum length is accepted by the API server, and so are its pods."""
    name = "l" + "x" * (MAX_NAME_LEN - 2) + "9"
    job_id = backend.submit(ddp_spec(workspace, name=name, options={"flavor": flavor}), QUICK)
    status = wait_for(backend, job_id, lambda s: s.is_terminal)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    hosts = [p["spec"].get("hostname") or p["metadata"]["name"] for p in toy_kubeflow.cluster.items(PODS)]
    assert hosts and all(len(h) <= 63 and h.startswith(job_id) for h in hosts)


def test_a_queue_name_is_a_label_value(toy: ToyCluster, backend: KubernetesBackend, workspace: Path) -> None:
    """Kueue's queue-name label takes at most 63 characters: a longer --queue would be a 422 at
    submit; it is refused before anything is created, naming the flag."""
    spec = ddp_spec(workspace, options={"flavor": "job", "queue": "q" * 64})
    with pytest.raises(InvalidSpecError) as err:
        backend.submit(spec, QUICK)
    message = str(err.value)
    assert message.startswith("--queue ") and "64 characters, over the 63" in message and "\n" not in message
    assert toy.cluster.count("POST") == 0 and not backend.store.ids()
    spec.options["queue"] = "q" * 63
    workload = backend.dryrun(spec).request.manifests[-1]
    assert workload["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q" * 63
    assert semantic_errors(workload) == []
