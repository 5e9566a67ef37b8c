"""Pod and workload objects → JobStatus: reasons verbatim, restarts, conditions (pure functions)."""

from __future__ import annotations

from typing import Any

from jupyter_disttrain.backends.kubernetes.flavors import flavor_named
from jupyter_disttrain.backends.kubernetes.status import build_status
from jupyter_disttrain.model.specs import JobPhase, JobStatus

JOB = flavor_named("job")


def pod(idx: int, created: str, status: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name or f"j-abcde-{idx}-x{created[-2:]}",
            "creationTimestamp": created,
            "labels": {
                "disttrain.io/job-id": "j-abcde",
                "batch.kubernetes.io/job-completion-index": str(idx),
            },
        },
        "spec": {"nodeName": "gpu-node-7"},
        "status": status,
    }


def cs(state: dict[str, Any], restarts: int = 0, last: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": "trainer",
        "image": "x",
        "imageID": "x",
        "ready": False,
        "restartCount": restarts,
        "state": state,
        "lastState": last or {},
    }


def test_reasons_are_passed_on_verbatim() -> None:
    oom = {"terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-01-01T00:00:09Z"}}
    crash = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}}
    pods = [
        pod(0, "2026-01-01T00:00:01Z", {"phase": "Failed", "containerStatuses": [cs(oom)]}),
        pod(
            1,
            "2026-01-01T00:00:01Z",
            {
                "phase": "Running",
                "containerStatuses": [
                    cs(crash, restarts=3, last={"terminated": {"exitCode": 1, "reason": "Error"}})
                ],
            },
        ),
    ]
    failed = {
        "status": {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastTransitionTime": "2026-01-01T00:00:10Z",
                }
            ]
        }
    }
    st = build_status(JobStatus(job_id="j-abcde"), JOB, "j-abcde", failed, pods, [])
    node0, node1 = st.replicas
    assert (node0.phase, node0.reason, node0.exit_code, node0.node) == (
        JobPhase.FAILED,
        "OOMKilled",
        137,
        "gpu-node-7",
    )
    assert (node1.reason, node1.restarts, node1.exit_code) == ("CrashLoopBackOff", 3, 1)
    assert st.phase is JobPhase.FAILED and st.reason == "BackoffLimitExceeded" and st.exit_code == 137
    assert (
        st.message
        == "Job has reached the specified backoff limit; replica node-0 failed: OOMKilled (exit code 137)"
    )
    assert (
        st.conditions[0].type == "Failed" and st.conditions[0].last_transition_time == "2026-01-01T00:00:10Z"
    )
    assert node1.phase is JobPhase.CANCELLED  # the job ended before this replica did


def test_replaced_pods_count_as_restarts_and_events_are_the_jobs() -> None:
    old = pod(
        0, "2026-01-01T00:00:01Z", {"phase": "Failed", "reason": "Evicted", "message": "node low on memory"}
    )
    new = pod(0, "2026-01-01T00:00:05Z", {"phase": "Running", "containerStatuses": [cs({"running": {}})]})
    events = [
        {
            "involvedObject": {"kind": "Pod", "name": new["metadata"]["name"]},
            "reason": "Started",
            "message": "m",
            "type": "Normal",
            "lastTimestamp": "2026-01-01T00:00:06Z",
        },
        {
            "involvedObject": {"kind": "Pod", "name": "other-job-0-xyz"},
            "reason": "Started",
            "message": "m",
            "type": "Normal",
            "lastTimestamp": "2026-01-01T00:00:06Z",
        },
    ]
    st = build_status(JobStatus(job_id="j-abcde"), JOB, "j-abcde", {"status": {}}, [old, new], events)
    (rep,) = st.replicas
    assert rep.phase is JobPhase.RUNNING and rep.restarts == 1 and st.phase is JobPhase.RUNNING
    assert [(e.reason, e.object) for e in st.events] == [("Started", f"Pod/{new['metadata']['name']}")]


def test_pending_job_shows_why() -> None:
    sched = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            }
        ],
    }
    st = build_status(JobStatus(job_id="j-abcde"), JOB, "j-abcde", {"status": {}}, [pod(0, "t1", sched)], [])
    assert (st.phase, st.reason) == (JobPhase.PENDING, "Unschedulable")
    assert st.message == "node-0: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def _warning(obj: str, reason: str, message: str, when: str) -> dict[str, Any]:
    kind, _, name = obj.partition("/")
    return {
        "involvedObject": {"kind": kind, "name": name},
        "type": "Warning",
        "reason": reason,
        "message": message,
        "lastTimestamp": when,
    }


def test_a_waiting_pods_latest_warning_is_its_reason() -> None:
    """The kubelet reports pulls as reason "Failed", message "Error: ErrImagePull"."""
    name = "j-abcde-0-x01"
    creating = pod(0, "2026-01-01T00:00:01Z", {"phase": "Pending", "containerStatuses": [
        cs({"waiting": {"reason": "ContainerCreating"}})
    ]}, name=name)  # fmt: skip
    events = [
        _warning(f"Pod/{name}", "FailedMount", 'configmap "j-abcde-code" not found', "2026-01-01T00:00:02Z"),
        _warning(f"Pod/{name}", "Failed", "Error: ErrImagePull", "2026-01-01T00:00:03Z"),
    ]
    status = build_status(JobStatus(job_id="j-abcde"), JOB, "j-abcde", None, [creating], events)
    assert (status.replicas[0].reason, status.replicas[0].message) == ("ErrImagePull", "Error: ErrImagePull")
    assert (status.phase, status.reason) == (JobPhase.PENDING, "ErrImagePull")


def test_an_ended_workload_is_held_open_until_the_pods_report() -> None:
    failed = {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
    running = pod(1, "2026-01-01T00:00:01Z", {"phase": "Running"})
    prev = JobStatus(job_id="j-abcde")
    held = build_status(prev, JOB, "j-abcde", {"status": failed}, [running], [], final=False)
    assert (held.phase, held.reason) == (JobPhase.RUNNING, "Ending")
    assert "BackoffLimitExceeded" in (held.message or "")
    final = build_status(prev, JOB, "j-abcde", {"status": failed}, [running], [])
    assert final.phase is JobPhase.FAILED and final.replicas[0].reason == "Stopped"
