"""The control loop through the real ``kubernetes`` client over HTTP against the toy cluster:
submit, watch, status with reasons, events, logs (PVC files and pods/log), cancel, delete."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.kubernetes.informer import all_informers
from jupyter_disttrain.model.errors import BackendError
from jupyter_disttrain.model.specs import JobPhase, JobStatus

from .conftest import DDP_SCRIPT, ddp_spec, wait_for
from .toycluster import PODS, SERVICES, ToyCluster


def test_indexed_job_runs_torchrun_end_to_end(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    errors = "import os\nprint('errors go to', os.environ['TORCHELASTIC_ERROR_FILE'], flush=True)\n"
    job_id = backend.submit(ddp_spec(workspace, options={"flavor": "job"}), errors + DDP_SCRIPT)
    status = wait_for(backend, job_id, lambda s: s.is_terminal)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    node0, node1 = status.replicas
    assert (node0.name, node0.phase, node0.exit_code, node0.node) == (
        "node-0",
        JobPhase.SUCCEEDED,
        0,
        "fake-node-1",
    )
    # successPolicy: the Job is done when rank 0 is; node-1 may be stopped before it reports.
    assert node1.name == "node-1" and node1.phase in (JobPhase.SUCCEEDED, JobPhase.CANCELLED)
    assert any(c.type == "Complete" and c.status == "True" for c in status.conditions)
    reasons = {(e.reason, (e.object or "").split("/")[0]) for e in status.events}
    assert {
        ("Submitted", ""),
        ("SuccessfulCreate", "Job"),
        ("Scheduled", "Pod"),
        ("Completed", "Job"),
    } <= reasons
    # The status on disk is what the Jupyter server (another process) reads.
    assert backend.store.read_status(job_id).phase is JobPhase.SUCCEEDED  # type: ignore[union-attr]

    # Logs were written by each pod to the job dir on the shared volume, per replica, rank-prefixed.
    lines = list(backend.logs(job_id))
    # torchrun's --tee copies and error files were in the pod's /tmp, removed as rank 0's pod ended
    # (a pool pod would keep them as long as it lives, in its ephemeral storage).
    (error_file,) = [ln.text.split()[-1] for ln in lines if ln.rank == 0 and "errors go to" in ln.text]
    elastic = Path(error_file).parents[3]  # LOG_DIR/RUN_ID/attempt_0/0/error.json
    assert elastic.name.startswith("torchelastic_") and not elastic.exists(), error_file
    texts = {(ln.replica, ln.rank, ln.text.split(" sum")[0]) for ln in lines if " sum=" in ln.text}
    assert texts == {("node-0", 0, "[rank0]:rank 0/2"), ("node-1", 1, "[rank1]:rank 1/2")}
    assert any(f"cwd={workspace / 'project'}" in ln.text for ln in lines)
    tb = backend.store.tensorboard_dir(job_id)
    assert any(f"tb={tb}" in ln.text for ln in lines)
    # The log stream's bulk read gives the same lines, in runs per replica and rank.
    runs = backend.log_runs(job_id)
    for replica in ("node-0", "node-1"):
        mine = [ln.text for ln in lines if ln.replica == replica]
        assert [t for r in runs if r.replica == replica for t in r.lines] == mine
    assert {(r.replica, r.rank) for r in runs if any(" sum=" in t for t in r.lines)} == {
        ("node-0", 0),
        ("node-1", 1),
    }
    # The same output from pods/log, tagged by replica (node-1's pod may already be removed by
    # the Job controller: that is why each pod also writes its log file on the shared volume).
    pod_lines = list(backend.pod_logs(job_id, "node-0"))
    assert [ln.text for ln in pod_lines if " sum=3 " in ln.text] == [f"[rank0]:rank 0/2 sum=3 job={job_id}"]
    tail = list(backend.pod_logs(job_id, "node-0", tail=1))
    assert len(tail) == 1 and tail[0].replica == "node-0" and tail[0].text == pod_lines[-1].text

    # Delete removes the workload, its pods and the Service; the files stay.
    backend.delete(job_id)
    c = toy.cluster
    assert not [p for p in c.items(PODS) if p["metadata"]["labels"].get("disttrain.io/job-id") == job_id]
    assert c.get(SERVICES, "team-a", job_id) is None and c.get("batch/v1/jobs", "team-a", job_id) is None
    assert backend.store.is_deleted(job_id)
    assert len(list(backend.logs(job_id))) == len(lines)


def test_pytorchjob_is_discovered_and_runs(
    toy_kubeflow: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    info = backend.dryrun(ddp_spec(workspace))
    assert info.request.flavor == "pytorchjob"  # found by API discovery
    job_id = backend.submit(ddp_spec(workspace), DDP_SCRIPT)
    status = wait_for(backend, job_id, lambda s: s.is_terminal)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    assert [r.name for r in status.replicas] == ["master-0", "worker-0"]
    assert any(c.type == "Succeeded" and c.reason == "PyTorchJobSucceeded" for c in status.conditions)
    ranks = {ln.replica: ln.rank for ln in backend.logs(job_id) if " sum=3 " in ln.text}
    assert ranks == {"master-0": 0, "worker-0": 1}
    # Everything above came from one watch per kind in the namespace, each listed once.
    assert sorted((i.res.plural, i.namespace, i.lists) for i in all_informers()) == [
        ("events", "team-a", 1),
        ("pods", "team-a", 1),
        ("pytorchjobs", "team-a", 1),
    ]
    since = list(backend.pod_logs(job_id, "master-0", since=3600))
    assert any(" sum=3 " in ln.text for ln in since)


def test_t9k_is_discovered_and_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workspace: Path) -> None:
    from .conftest import start_toy

    gen = start_toy(monkeypatch, tmp_path, install=("t9k",))
    next(gen)
    try:
        backend = KubernetesBackend(backend_store(workspace))
        job_id = backend.submit(ddp_spec(workspace), DDP_SCRIPT)
        assert backend.store.read_record(job_id).request["flavor"] == "t9k"
        status = wait_for(backend, job_id, lambda s: s.is_terminal)
        assert status.phase is JobPhase.SUCCEEDED, status.message
        assert [r.name for r in status.replicas] == ["worker-0", "worker-1"]
        # T9k runs torchrun itself (no wrapper): the output comes from pods/log.
        lines = {(ln.replica, ln.rank) for ln in backend.logs(job_id) if " sum=3 " in ln.text}
        assert lines == {("worker-0", 0), ("worker-1", 1)}
    finally:
        gen.close()


def test_failed_rank_fails_the_job_with_its_exit_code(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    spec = ddp_spec(workspace, env={"FAIL_RANK": "1"}, options={"flavor": "job"})
    job_id = backend.submit(spec, DDP_SCRIPT)
    status = wait_for(backend, job_id, lambda s: s.is_terminal)
    assert status.phase is JobPhase.FAILED
    assert status.reason == "BackoffLimitExceeded"
    bad = next(r for r in status.replicas if r.name == "node-1")
    assert bad.phase is JobPhase.FAILED and bad.reason == "Error" and bad.exit_code not in (None, 0)
    assert "replica node-1 failed" in (status.message or "")


def test_pending_reasons_are_verbatim(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workspace: Path
) -> None:
    from .conftest import start_toy

    gen = start_toy(monkeypatch, tmp_path, gpus=1, bad_images=("registry.example/missing:1",))
    toy = next(gen)
    try:
        backend = KubernetesBackend(backend_store(workspace))
        pull = backend.submit(
            ddp_spec(workspace, image="registry.example/missing:1", options={"flavor": "job"}), ""
        )
        big = backend.submit(
            ddp_spec(workspace, nproc_per_node=4, accelerator="gpu", options={"flavor": "job"}), ""
        )
        st = wait_for(backend, pull, lambda s: s.reason == "ImagePullBackOff")
        assert st.phase is JobPhase.PENDING and all(r.reason == "ImagePullBackOff" for r in st.replicas)
        assert any(e.reason == "Failed" and "Failed to pull image" in e.message for e in st.events)
        st = wait_for(backend, big, lambda s: s.reason == "Unschedulable")
        assert "Insufficient nvidia.com/gpu" in (st.message or "")
        assert any(e.reason == "FailedScheduling" for e in st.events)
        # Cancel removes what exists; a cancelled job stays cancelled.
        assert backend.cancel(big).phase is JobPhase.CANCELLED
        assert backend.describe(big).phase is JobPhase.CANCELLED
        assert not [
            p for p in toy.cluster.items(PODS) if p["metadata"]["labels"].get("disttrain.io/job-id") == big
        ]
    finally:
        gen.close()


def backend_store(workspace: Path):  # type: ignore[no-untyped-def]
    from jupyter_disttrain.storage.store import JobStore

    return JobStore(workspace / ".disttrain" / "jobs")


SLOW_SCRIPT = """\
import time
for i in range(600):
    print(f"tick {i}", flush=True)
    time.sleep(0.2)
"""


def test_follow_logs_cancel_and_watch_recovery(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    spec = ddp_spec(workspace, nodes=1, options={"flavor": "job"})
    job_id = backend.submit(spec, SLOW_SCRIPT)
    wait_for(backend, job_id, lambda s: s.phase is JobPhase.RUNNING)
    follow = backend.logs(job_id, follow=True)
    seen = [next(follow).text for _ in range(3)]
    assert any("tick" in t for t in seen)
    live = backend.pod_logs(job_id, follow=True, tail=1)  # pods/log with follow, replica-tagged
    first, second = next(live), next(live)
    assert first.replica == second.replica == "node-0" and "]:tick " in second.text
    live.close()

    pods_inf = next(i for i in all_informers() if i.res.plural == "pods")
    lists, watches = pods_inf.lists, pods_inf.watches
    toy.cluster.drop_watches()  # a dropped watch resumes from its resourceVersion, no re-list
    wait_for(backend, job_id, lambda s: pods_inf.watches > watches)
    assert pods_inf.lists == lists
    toy.cluster.compact()  # history gone: 410 Gone, the informer lists again
    toy.cluster.drop_watches()
    wait_for(backend, job_id, lambda s: pods_inf.lists > lists)

    status = backend.cancel(job_id)
    assert status.phase is JobPhase.CANCELLED
    assert any(e.reason == "Cancelled" for e in status.events)
    rest = list(follow)  # follow ends once the job has ended and everything was read
    ticks = [int(t.rsplit(" ", 1)[1]) for t in [*seen, *(ln.text for ln in rest)] if "]:tick " in t]
    assert ticks == list(range(len(ticks))) and len(ticks) > 3  # no line lost or repeated
    assert toy.cluster.get("batch/v1/jobs", "team-a", job_id) is None
    # Another process (the Jupyter server) that read the status before the cancel does not
    # overwrite the ended record with what it saw.
    other = KubernetesBackend(backend.store)
    stale = JobStatus(job_id=job_id, phase=JobPhase.RUNNING)
    assert other._reconcile(backend.store.read_record(job_id), stale).phase is JobPhase.CANCELLED
    assert backend.store.read_status(job_id).phase is JobPhase.CANCELLED  # type: ignore[union-attr]


def test_missing_permission_names_verb_and_resource(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    toy.cluster.denied.add(("create", "jobs"))
    with pytest.raises(BackendError) as err:
        backend.submit(ddp_spec(workspace, options={"flavor": "job"}), DDP_SCRIPT)
    assert "may not create jobs.batch in namespace 'team-a'" in str(err.value)
    assert "deploy/rbac.yaml" in str(err.value)
    (job_id,) = backend.store.ids()
    assert backend.store.read_status(job_id).reason == "SubmitFailed"  # type: ignore[union-attr]
    # The Service created before the refusal was rolled back.
    assert toy.cluster.get(SERVICES, "team-a", job_id) is None


def test_configmap_ships_the_script_when_the_job_dir_is_not_shared(
    toy: ToyCluster, workspace: Path, tmp_path: Path
) -> None:
    from jupyter_disttrain.model.errors import InvalidSpecError
    from jupyter_disttrain.storage.store import JobStore

    backend = KubernetesBackend(JobStore(tmp_path / "local-jobs"))  # not under the mounted workspace
    spec = ddp_spec(workspace, nodes=1, options={"flavor": "job"})
    job_id = backend.submit(spec, DDP_SCRIPT, files={"labels.txt": b"cat\ndog\n"})
    cm = toy.cluster.get("/v1/configmaps", "team-a", f"{job_id}-code")
    assert cm is not None and cm["data"] == {"labels.txt": "cat\ndog\n", "train.py": DDP_SCRIPT}
    status = wait_for(backend, job_id, lambda s: s.is_terminal)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    lines = [ln for ln in backend.logs(job_id) if " sum=" in ln.text]  # from pods/log
    assert [(ln.replica, ln.text) for ln in lines] == [("node-0", f"[rank0]:rank 0/1 sum=1 job={job_id}")]
    runs = backend.log_runs(job_id)  # pods/log lines, grouped for the log stream
    assert [t for r in runs for t in r.lines] == [ln.text for ln in backend.logs(job_id)]
    summed = f"[rank0]:rank 0/1 sum=1 job={job_id}"
    assert [(r.replica, r.rank) for r in runs if summed in r.lines] == [("node-0", 0)]
    assert backend.log_runs(job_id, offset=runs[-1].offset) == []  # nothing after the last run
    backend.delete(job_id)
    assert toy.cluster.get("/v1/configmaps", "team-a", f"{job_id}-code") is None

    with pytest.raises(InvalidSpecError, match="ConfigMap limit"):
        backend.submit(spec, DDP_SCRIPT, files={"weights.bin": bytes(1_100_000)})
    assert not toy.cluster.items("/v1/configmaps") and not toy.cluster.items("batch/v1/jobs")


def test_missing_list_permission_is_named(
    toy: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    job_id = backend.submit(ddp_spec(workspace, nodes=1, options={"flavor": "job"}), "print('hi')\n")
    toy.cluster.denied.add(("list", "pods"))
    with pytest.raises(BackendError, match="may not list pods in namespace 'team-a'"):
        backend.describe(job_id)


def test_pytorchjob_priority_class_and_queue_reach_the_pods_and_kueue(
    toy_kubeflow: ToyCluster, backend: KubernetesBackend, workspace: Path
) -> None:
    """Without a gang scheduler the operator ignores schedulingPolicy: the pods carry the
    priority class themselves, and Kueue reads its label on the workload."""
    options = {"flavor": "pytorchjob", "priority_class": "team-high", "queue": "research"}
    job_id = backend.submit(ddp_spec(workspace, options=options), DDP_SCRIPT)
    wait_for(backend, job_id, lambda s: len(s.replicas) == 2 and all(r.node for r in s.replicas))
    c = toy_kubeflow.cluster
    pj = c.get("kubeflow.org/v1/pytorchjobs", "team-a", job_id)
    assert pj is not None and pj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "research"
    pods = [p for p in c.items(PODS) if p["metadata"]["labels"].get("disttrain.io/job-id") == job_id]
    assert len(pods) == 2 and {p["spec"].get("priorityClassName") for p in pods} == {"team-high"}
    backend.cancel(job_id)


@pytest.mark.parametrize("flavor", ["job", "t9k"])
def test_every_flavour_carries_the_kueue_label(
    backend: KubernetesBackend, workspace: Path, flavor: str
) -> None:
    spec = ddp_spec(workspace, options={"flavor": flavor, "queue": "research", "priority_class": "hi"})
    workload = backend.dryrun(spec).request.manifests[-1]
    assert workload["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "research"


def test_the_headless_service_selects_the_pods_on_kubernetes_1_26(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workspace: Path
) -> None:
    """On 1.26 the Job controller labels pods ``job-name`` only: the Service must still select
    them, or ``<job>-0.<job>`` (the rendezvous address) never resolves."""
    from jupyter_disttrain.backends.kubernetes.client import KubeClient, Resource

    from .conftest import start_toy

    gen = start_toy(monkeypatch, tmp_path, version=(1, 26))
    next(gen)
    try:
        backend = KubernetesBackend(backend_store(workspace))
        job_id = backend.submit(ddp_spec(workspace, options={"flavor": "job"}), SLOW_SCRIPT)
        wait_for(backend, job_id, lambda s: all(r.phase is JobPhase.RUNNING for r in s.replicas))
        client = KubeClient.from_environment()
        assert client is not None
        endpoints = Resource("", "v1", "endpoints", "Endpoints")
        deadline = time.monotonic() + 30
        hosts: list[str] = []
        while time.monotonic() < deadline and len(hosts) < 2:
            ep = client.get(endpoints, "team-a", job_id) or {}
            hosts = [a.get("hostname", "") for s in ep.get("subsets", []) for a in s.get("addresses", [])]
            time.sleep(0.1)
        assert sorted(hosts) == [f"{job_id}-0", f"{job_id}-1"]
        backend.cancel(job_id)
    finally:
        gen.close()
