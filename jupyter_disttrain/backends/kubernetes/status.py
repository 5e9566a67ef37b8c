"""Cluster objects → ``JobStatus``: replicas from pods, conditions from the workload, events.

Pure functions over the dicts the informers hold. Reasons and messages are passed on verbatim
(``ImagePullBackOff``, ``OOMKilled``, ``Unschedulable`` with the scheduler's message), because
that is what a user searches for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...model.specs import Condition, Event, JobPhase, JobStatus, ReplicaStatus, now_iso

if TYPE_CHECKING:  # the flavours build on this module
    from .flavors import Flavor

MAX_EVENTS = 200

# Pod phase → replica phase. "Unknown" (node lost) stays Pending until the pod is replaced.
_POD_PHASE = {
    "Pending": JobPhase.PENDING,
    "Running": JobPhase.RUNNING,
    "Succeeded": JobPhase.SUCCEEDED,
    "Failed": JobPhase.FAILED,
    "Unknown": JobPhase.PENDING,
}


def replica_from_pod(flavor: Flavor, job_id: str, pod: dict[str, Any]) -> ReplicaStatus:
    name, role, index = flavor.replica_of(job_id, pod)
    st = pod.get("status", {})
    spec = pod.get("spec", {})
    rep = ReplicaStatus(
        name=name,
        role=role,
        index=index,
        phase=_POD_PHASE.get(st.get("phase", "Pending"), JobPhase.PENDING),
        node=spec.get("nodeName"),
        start_time=st.get("startTime"),
    )
    if pod.get("metadata", {}).get("deletionTimestamp") and not rep.phase.is_terminal:
        rep.reason = "Terminating"
    conds = {c.get("type"): c for c in st.get("conditions", [])}
    rep.ready = conds.get("Ready", {}).get("status") == "True"
    sched = conds.get("PodScheduled")
    if sched and sched.get("status") == "False":
        rep.reason, rep.message = sched.get("reason"), sched.get("message")
    for cs in st.get("containerStatuses", []):
        rep.restarts += int(cs.get("restartCount", 0))
        state = cs.get("state", {})
        last = cs.get("lastState", {}).get("terminated")
        if "waiting" in state:
            w = state["waiting"]
            rep.reason, rep.message = w.get("reason"), w.get("message")
            if last:
                rep.exit_code = last.get("exitCode")
        elif "terminated" in state:
            t = state["terminated"]
            rep.exit_code = t.get("exitCode")
            rep.reason, rep.message = t.get("reason"), t.get("message")
            rep.finish_time = t.get("finishedAt")
    if rep.reason is None and st.get("reason"):  # e.g. Evicted, with the kubelet's message
        rep.reason, rep.message = st.get("reason"), st.get("message")
    return rep


def replicas_from_pods(
    flavor: Flavor,
    job_id: str,
    pods: list[dict[str, Any]],
    expected: list[ReplicaStatus],
    warnings: dict[str, Event] | None = None,
) -> list[ReplicaStatus]:
    """One entry per replica: the newest pod of each; replaced pods count as restarts. A pod
    waiting without a reason of its own gets its latest warning (``warnings``, by pod name).
    Roles keep the order of ``expected`` (the flavour's replica groups), others follow by name."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        by_name.setdefault(flavor.replica_of(job_id, pod)[0], []).append(pod)
    out: dict[str, ReplicaStatus] = {r.name: r for r in expected}
    for name, group in by_name.items():
        group.sort(key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"].get("name", "")))
        rep = replica_from_pod(flavor, job_id, group[-1])
        rep.restarts += len(group) - 1
        warning = (warnings or {}).get(group[-1]["metadata"].get("name", ""))
        # A node being added explains an unschedulable pod better than the scheduler does.
        own = (
            None,
            *_STARTING,
            *(("Unschedulable",) if warning and warning.reason == WAITING_FOR_NODE else ()),
        )
        if warning is not None and rep.phase is JobPhase.PENDING and rep.reason in own:
            rep.reason, rep.message = warning.reason, warning.message
        out[name] = rep
    roles = list(dict.fromkeys(r.role for r in expected))
    return sorted(
        out.values(), key=lambda r: (roles.index(r.role) if r.role in roles else len(roles), r.role, r.index)
    )


# Warnings that explain why a pod (or the workload's pods) cannot start; the kubelet reports
# image pulls as reason "Failed" with the message "Error: ErrImagePull". A workload's controller
# says it could not create its pods: FailedCreate (Job), FailedCreatePod (the training operator).
STUCK_REASONS = (
    "FailedCreate",
    "FailedCreatePod",
    "FailedScheduling",
    "FailedAttachVolume",
    "FailedMount",
    "ImagePullBackOff",
    "ErrImagePull",
)
_STARTING = ("ContainerCreating", "PodInitializing")
# What the cluster is doing for a pod that has not started yet, named from its events: the
# kubelet pulling its image (``Pulling`` until ``Pulled`` or a failure), the cluster autoscaler
# adding a node for it (``TriggeredScaleUp`` until it is scheduled or ``NotTriggerScaleUp``).
PULLING_IMAGE, WAITING_FOR_NODE = "PullingImage", "WaitingForNode"
PROGRESS = (PULLING_IMAGE, WAITING_FOR_NODE)
_ENDS = {PULLING_IMAGE: ("Pulled", "Failed", "BackOff"), WAITING_FOR_NODE: ("NotTriggerScaleUp", "Scheduled")}


def latest_warnings(events: list[Event]) -> dict[str, Event]:
    """Object name → what says why it has not started: its latest warning (reason normalised),
    or the work in progress for it (``PROGRESS``), which a later event may end."""
    out: dict[str, Event] = {}
    for ev in events:  # oldest first: later ones win
        reason = ev.reason
        if reason == "Failed" and ev.message.startswith("Error: "):
            reason = ev.message[len("Error: ") :]
        name = (ev.object or "").partition("/")[2]
        now = out.get(name)
        if now is not None and now.reason in PROGRESS and ev.reason in _ENDS[now.reason]:
            del out[name]
            now = None
        if ev.type == "Warning" and reason in STUCK_REASONS:
            if not (now is not None and now.reason == WAITING_FOR_NODE and reason == "FailedScheduling"):
                out[name] = Event(ev.time, ev.type, reason, ev.message, ev.object, ev.count)
        elif ev.reason == "Pulling":  # 'Pulling image "pytorch:2.13"'
            out[name] = Event(ev.time, ev.type, PULLING_IMAGE, _lower_first(ev.message), ev.object, ev.count)
        elif ev.reason == "TriggeredScaleUp":  # "pod triggered scale-up: [{pool 1->2 (max: 5)}]"
            message = f"waiting for a node: {ev.message}"
            out[name] = Event(ev.time, ev.type, WAITING_FOR_NODE, message, ev.object, ev.count)
    return out


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


# Admission refusals that no retry gets past (unlike a quota that is used up now): the pods as
# specified are refused. What each says, and what to do about it.
_PERMANENT = (
    ("violates PodSecurity", "the namespace's PodSecurity level refuses these pods"),
    (
        "must specify",
        "the namespace's ResourceQuota needs cpu and memory requests and limits: pass --cpu and --memory",
    ),
    ("no PriorityClass with name", "no such priority class: check --priority-class"),
    ("error looking up service account", "no such service account: check --service-account"),
)


def permanent_refusal(message: str) -> str | None:
    """What to do about an admission refusal of the job's pods that will not change by waiting;
    None for one that may (an exceeded quota, a webhook that is down)."""
    return next((hint for words, hint in _PERMANENT if words in message), None)


def conditions_of(workload: dict[str, Any] | None) -> list[Condition]:
    if not workload:
        return []
    return [
        Condition(
            type=c.get("type", ""),
            status=c.get("status", ""),
            reason=c.get("reason"),
            message=c.get("message"),
            last_transition_time=c.get("lastTransitionTime") or c.get("lastUpdateTime"),
        )
        for c in workload.get("status", {}).get("conditions", []) or []
    ]


def events_for(job_id: str, events: list[dict[str, Any]]) -> list[Event]:
    """Events of the workload and its pods (and Service/ConfigMap), oldest first."""
    out = []
    for ev in events:
        obj = ev.get("involvedObject", {})
        name = obj.get("name", "")
        if name != job_id and not name.startswith(job_id + "-"):
            continue
        when = (
            ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("metadata", {}).get("creationTimestamp")
        )
        out.append(
            Event(
                time=when or now_iso(),
                type=ev.get("type", "Normal"),
                reason=ev.get("reason", ""),
                message=ev.get("message", ""),
                object=f"{obj.get('kind', '')}/{name}",
                count=int(ev.get("count") or 1),
            )
        )
    out.sort(key=lambda e: e.time)
    return out[-MAX_EVENTS:]


def pods_settled(pods: list[dict[str, Any]]) -> bool:
    """Whether every pod has reported its end (or is being removed, so will not report one)."""
    return all(
        p.get("status", {}).get("phase") in ("Succeeded", "Failed")
        or p.get("metadata", {}).get("deletionTimestamp")
        for p in pods
    )


def build_status(
    prev: JobStatus,
    flavor: Flavor,
    job_id: str,
    workload: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    events: list[dict[str, Any]],
    final: bool = True,
    siblings: Sequence[dict[str, Any]] = (),
) -> JobStatus:
    """The job's status now, from its workload object, its pods and the namespace's events.

    ``final=False`` holds an ended workload's job open: the workload's and the pods' watches are
    independent, so its end can arrive before the pods' last updates (who failed, exit codes).
    ``siblings``: the workload's sibling objects of its own kind (a parameter-server job's
    scheduler and server Jobs); one that failed fails the job, though the workload still runs.
    """
    status = JobStatus.from_dict(prev.to_dict())
    cluster_events = events_for(job_id, events)
    warnings = latest_warnings(cluster_events)
    status.replicas = replicas_from_pods(flavor, job_id, pods, prev.replicas, warnings)
    status.conditions = conditions_of(workload)
    own = [e for e in prev.events if e.object is None]  # ours (Submitted, Cancelled...), not the cluster's
    status.events = sorted(own + cluster_events, key=lambda e: e.time)[-MAX_EVENTS:]
    wst = (workload or {}).get("status", {}) or {}
    status.start_time = status.start_time or wst.get("startTime")
    phase, reason, message = _sibling_failure(flavor, siblings, status.replicas) or _phase(
        flavor, status.conditions, wst, status.replicas
    )
    refused = warnings.get(job_id)
    with_pods = {flavor.replica_of(job_id, p)[0] for p in pods}
    if refused and not phase.is_terminal and any(r.name not in with_pods for r in status.replicas):
        # The workload's own warning (FailedCreate: a quota or PodSecurity refused its pods).
        reason, message = refused.reason, refused.message
        hint = permanent_refusal(refused.message)
        if hint:  # no wait for the pending timeout: the job fails now, saying what to change
            phase, message = JobPhase.FAILED, f"{hint}: {refused.message}"
    if phase.is_terminal and not final:
        message = f"the workload ended ({reason or phase.value}); waiting for its pods to report"
        phase, reason = JobPhase.RUNNING, "Ending"
    if phase.is_terminal:
        status.end(phase, reason, message, at=status.finish_time or wst.get("completionTime"))
        _finish(status)
        return status
    status.phase, status.reason, status.message = phase, reason, message
    if phase is JobPhase.RUNNING and not status.start_time:
        status.start_time = now_iso()
    return status


def _finish(status: JobStatus) -> None:
    """Close an ended job: replicas still running were stopped; the exit code is the failed one's."""
    for rep in status.replicas:  # e.g. stopped by the Job controller once rank 0 succeeded
        if not rep.phase.is_terminal:
            rep.phase, rep.reason = JobPhase.CANCELLED, rep.reason or "Stopped"
            rep.message = rep.message or "the job ended before this replica did"
    failed = next((r for r in status.replicas if r.phase is JobPhase.FAILED), None)
    status.exit_code = 0 if status.phase is JobPhase.SUCCEEDED else (failed.exit_code if failed else 1)


def _phase(
    flavor: Flavor, conds: list[Condition], wst: dict[str, Any], replicas: list[ReplicaStatus]
) -> tuple[JobPhase, str | None, str | None]:
    end = flavor.workload_end(conds, wst)
    if end is None:
        return _progress(replicas)
    phase, reason, message = end
    if phase is JobPhase.FAILED:
        message = _with_failed_replica(message, replicas)
    return phase, reason, message


def _sibling_failure(
    flavor: Flavor, siblings: Sequence[dict[str, Any]], replicas: list[ReplicaStatus]
) -> tuple[JobPhase, str | None, str | None] | None:
    """The first sibling workload that failed, as the job's end; None when none did."""
    for sib in siblings:
        end = flavor.workload_end(conditions_of(sib), sib.get("status", {}) or {})
        if end is not None and end[0] is JobPhase.FAILED:
            what = f"{sib.get('kind', 'workload')} {sib.get('metadata', {}).get('name')} failed"
            return JobPhase.FAILED, end[1], _with_failed_replica(f"{what}: {end[2] or end[1]}", replicas)
    return None


def _with_failed_replica(message: str | None, replicas: list[ReplicaStatus]) -> str | None:
    """A failed job's message, with which replica failed, how, and its last words."""
    bad = next((r for r in replicas if r.phase is JobPhase.FAILED), None)
    if bad is None:
        return message
    detail = f"replica {bad.name} failed: {bad.reason or 'Error'} (exit code {bad.exit_code})"
    # The container's last words (its termination message: the end of its output).
    last = (bad.message or "").strip().splitlines()[-1:]
    detail += f": {last[0]}" if last else ""
    return f"{message}; {detail}" if message else detail


def _progress(replicas: list[ReplicaStatus]) -> tuple[JobPhase, str | None, str | None]:
    """Running or Pending, while the workload has not ended."""
    # A replica that cannot start (ImagePullBackOff, Unschedulable, Multi-Attach...) says why at
    # job level, also while the others run: they wait for it at the rendezvous.
    stuck = next(
        (r for r in replicas if r.phase is JobPhase.PENDING and r.reason and r.reason not in _STARTING), None
    )
    why = (stuck.reason, f"{stuck.name}: {stuck.message or stuck.reason}") if stuck else (None, None)
    if any(r.phase is JobPhase.RUNNING for r in replicas):
        return JobPhase.RUNNING, *why
    return JobPhase.PENDING, *why
