"""Toy controllers for the fake API server: Indexed Job, PyTorchJob, and a kubelet that runs
each pod's container command as a LOCAL PROCESS with the pod's environment.

The controllers follow the real ones where the backend can see it: pod names, hostnames, labels
(the Job controller's by server version: ``batch.kubernetes.io/job-name`` only from 1.27),
annotations and injected env (``JOB_COMPLETION_INDEX``; the Kubeflow operator's ``PET_*``,
``MASTER_*``, ``WORLD_SIZE``, ``RANK``), job conditions and counters, events, ownerReferences.

The kubelet ignores GPU requests as long as they fit its fake node (``gpus`` per node; more
is ``Unschedulable`` with the scheduler's message), so a ``--gpus 1`` job runs CPU torchrun
processes. An endpoints controller fills each Service's
``Endpoints`` from the pods its selector matches (what cluster DNS serves for
``<hostname>.<service>``); a garbage collector removes objects whose owners are all gone
(``Background`` deletes, ownerReferences set afterwards) and a TTL controller finished Jobs
past ``ttlSecondsAfterFinished``. Rendezvous addresses (``PET_MASTER_ADDR``/``MASTER_ADDR``, a
parameter server's ``DMLC_PS_ROOT_URI``) are rewritten to 127.0.0.1 and each job's port to a free
local one. Volumes: PVC mounts must be host paths (the tests mount tmp dirs at the same paths, as a
shared PVC would be); emptyDir and configMap mounts are materialised in a per-pod sandbox and their
paths rewritten in argv, env and cwd.
"""

from __future__ import annotations

import abc
import base64
import calendar
import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .fakeapi import BATCH_JOBS, PYTORCHJOBS, T9KJOBS, ApiStatus, FakeCluster, label_matcher, now

PODS = "/v1/pods"
SERVICES = "/v1/services"
CONFIGMAPS = "/v1/configmaps"
ENDPOINTS = "/v1/endpoints"
PVCS = "/v1/persistentvolumeclaims"
_FIELD = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _owner(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _owned_by(pod: dict[str, Any], owner: dict[str, Any]) -> bool:
    return any(r.get("uid") == owner["metadata"]["uid"] for r in pod["metadata"].get("ownerReferences", []))


def _set_condition(
    conds: list[dict[str, Any]], type_: str, status: str, reason: str, message: str = ""
) -> None:
    for c in conds:
        if c["type"] == type_:
            if c["status"] != status:
                c.update(status=status, reason=reason, message=message, lastTransitionTime=now())
            c["lastUpdateTime"] = now()
            return
    conds.append(
        {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now(),
            "lastUpdateTime": now(),
        }
    )


class Loop(abc.ABC):
    """A thread that calls ``reconcile`` whenever the cluster changes (and every 100 ms)."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        seen = -1
        while not self._stop.is_set():
            with self.cluster.cond:
                self.cluster.cond.wait_for(lambda s=seen: self.cluster.rv != s or self._stop.is_set(), 0.1)
                seen = self.cluster.rv
            try:
                self.reconcile()
            except Exception as exc:  # keep the toy running; tests see the effect
                print(f"{type(self).__name__}: {exc!r}", file=sys.stderr)

    @abc.abstractmethod
    def reconcile(self) -> None:
        """Bring the cluster one step closer to what its objects ask for."""


def _pod_from_template(owner: dict[str, Any], template: dict[str, Any], name: str) -> dict[str, Any]:
    import copy

    meta = copy.deepcopy(template.get("metadata", {}))
    meta.update(name=name, namespace=owner["metadata"]["namespace"], ownerReferences=[_owner(owner)])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": copy.deepcopy(template["spec"]),
        "status": {"phase": "Pending"},
    }


def _ignored(job: dict[str, Any], pod: dict[str, Any]) -> bool:
    """Whether the Job's podFailurePolicy has an ``Ignore`` rule for this failed pod's conditions
    (its failure then does not count against backoffLimit, as in the real controller)."""
    conditions = {(c["type"], c["status"]) for c in pod["status"].get("conditions", [])}
    for rule in job["spec"].get("podFailurePolicy", {}).get("rules", []):
        wanted = {(c["type"], c.get("status", "True")) for c in rule.get("onPodConditions", [])}
        if rule.get("action") == "Ignore" and wanted and wanted & conditions:
            return True
    return False


class IndexedJobController(Loop):
    """batch/v1 Job with completionMode Indexed: pods, counters, Complete/Failed conditions.

    A suspended Job (``spec.suspend``, as Kueue holds it) has no pods and the condition
    ``Suspended``; once resumed the controller syncs it again after ``resume_delay`` seconds (its
    work queue's latency), and then resets ``status.startTime`` to that moment and sets the
    condition False, reason ``JobResumed``, in one status write (kubernetes.io/docs/concepts/
    workloads/controllers/job/#suspending-a-job)."""

    def __init__(self, cluster: FakeCluster, resume_delay: float = 0.0) -> None:
        super().__init__(cluster)
        self.resume_delay = resume_delay
        self._resumed_at: dict[str, float] = {}  # uid of a Job seen suspended -> when seen resumed

    def reconcile(self) -> None:
        pods = self.cluster.items(PODS)
        for job in self.cluster.items(BATCH_JOBS.key):
            uid = job["metadata"]["uid"]
            if job["spec"].get("suspend"):
                self._resumed_at[uid] = 0.0
                self._suspend(job, pods)
                continue
            resumed = uid in self._resumed_at
            if resumed:
                since = self._resumed_at[uid] = self._resumed_at[uid] or time.monotonic()
                if time.monotonic() - since < self.resume_delay:
                    continue
                del self._resumed_at[uid]
            self._sync(job, pods, resumed)

    def _suspend(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        """No pods while suspended (running ones are stopped), and the ``Suspended`` condition."""
        c = self.cluster
        for p in pods:
            if _owned_by(p, job) and p["status"].get("phase") in ("Pending", "Running"):
                with contextlib.suppress(ApiStatus):
                    c.delete(PODS, p["metadata"]["namespace"], p["metadata"]["name"])

        conds = job.get("status", {}).get("conditions", [])
        if any(x["type"] == "Suspended" and x["status"] == "True" for x in conds):
            return

        def suspended(obj: dict[str, Any]) -> None:
            st = obj.setdefault("status", {})
            st["active"] = 0
            _set_condition(
                st.setdefault("conditions", []), "Suspended", "True", "JobSuspended", "Job suspended"
            )

        c.update(BATCH_JOBS.key, job["metadata"]["namespace"], job["metadata"]["name"], suspended)

    def _sync(self, job: dict[str, Any], pods: list[dict[str, Any]], resumed: bool = False) -> None:
        c = self.cluster
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        mine = [p for p in pods if _owned_by(p, job)]
        conds = job.get("status", {}).get("conditions", [])
        finished = any(x["type"] in ("Complete", "Failed") and x["status"] == "True" for x in conds)
        completions = job["spec"]["completions"]
        backoff = job["spec"].get("backoffLimit", 6)
        failed = sum(1 for p in mine if p["status"].get("phase") == "Failed" and not _ignored(job, p))
        done_idx = {
            int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
            for p in mine
            if p["status"].get("phase") == "Succeeded"
        }
        active = [p for p in mine if p["status"].get("phase") in ("Pending", "Running")]
        if not finished and failed <= backoff:
            for idx in range(completions):
                live = [
                    p
                    for p in active
                    if p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == str(idx)
                ]
                if idx in done_idx or live:
                    continue
                pod = self._make_pod(job, idx, c.version)
                try:
                    c.create(PODS, ns, pod)
                except ApiStatus as exc:  # as the real controller: an event, and try again later
                    c.record_event(job, "Warning", "FailedCreate", f"Error creating: {exc.message}")
                    continue
                c.record_event(job, "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}")
        rules = job["spec"].get("successPolicy", {}).get("rules", [])
        success = len(done_idx) == completions or any(
            r.get("succeededIndexes") and {int(i) for i in r["succeededIndexes"].split(",")} <= done_idx
            for r in rules
        )

        def status(obj: dict[str, Any]) -> None:
            st = obj.setdefault("status", {})
            st.setdefault("startTime", now())
            if resumed:
                st["startTime"] = now()
                _set_condition(
                    st.setdefault("conditions", []), "Suspended", "False", "JobResumed", "Job resumed"
                )
            st["active"] = len(active)
            st["ready"] = sum(1 for p in active if p["status"].get("phase") == "Running")
            st["succeeded"] = len(done_idx)
            st["failed"] = failed
            st["completedIndexes"] = ",".join(map(str, sorted(done_idx)))
            cs = st.setdefault("conditions", [])
            if finished:
                return
            if failed > backoff:
                _set_condition(
                    cs,
                    "FailureTarget",
                    "True",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                )
                _set_condition(
                    cs,
                    "Failed",
                    "True",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                )
            elif success:
                _set_condition(
                    cs,
                    "SuccessCriteriaMet",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                )
                _set_condition(
                    cs,
                    "Complete",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                )
                st["completionTime"] = now()

        new = c.update(BATCH_JOBS.key, ns, name, status)
        now_finished = new is not None and any(
            x["type"] in ("Complete", "Failed") and x["status"] == "True"
            for x in new["status"].get("conditions", [])
        )
        if now_finished and not finished:
            reason = "Completed" if success and failed <= backoff else "BackoffLimitExceeded"
            kind = "Normal" if reason == "Completed" else "Warning"
            c.record_event(
                job,
                kind,
                reason,
                "Job completed" if kind == "Normal" else "Job has reached the specified backoff limit",
            )
            for p in active:  # the Job controller removes what is still running
                with contextlib.suppress(Exception):
                    c.delete(PODS, ns, p["metadata"]["name"])

    @staticmethod
    def _make_pod(job: dict[str, Any], idx: int, version: tuple[int, int]) -> dict[str, Any]:
        name = job["metadata"]["name"]
        pod = _pod_from_template(job, job["spec"]["template"], f"{name}-{idx}-{secrets.token_hex(3)[:5]}")
        labels = pod["metadata"].setdefault("labels", {})
        uid = job["metadata"]["uid"]
        labels.update({"job-name": name, "controller-uid": uid})
        if version >= (1, 27):  # the prefixed labels are new in 1.27, the index label in 1.28
            labels.update({"batch.kubernetes.io/job-name": name, "batch.kubernetes.io/controller-uid": uid})
        if version >= (1, 28):
            labels["batch.kubernetes.io/job-completion-index"] = str(idx)
        pod["metadata"].setdefault("annotations", {})["batch.kubernetes.io/job-completion-index"] = str(idx)
        pod["spec"]["hostname"] = f"{name}-{idx}"
        for ctr in pod["spec"]["containers"]:
            ctr.setdefault("env", []).insert(0, {"name": "JOB_COMPLETION_INDEX", "value": str(idx)})
        return pod


class PyTorchJobController(Loop):
    """kubeflow.org/v1 PyTorchJob (training operator v1 behaviour, the parts the backend sees).
    A pod the API server refuses is a ``FailedCreatePod`` warning on the job, ``Error creating:``
    and the refusal (kubeflow/common's pod control), recorded once per message here."""

    def __init__(self, cluster: FakeCluster) -> None:
        super().__init__(cluster)
        self._refused: set[tuple[str, str]] = set()

    def reconcile(self) -> None:
        pods = self.cluster.items(PODS)
        for pj in self.cluster.items(PYTORCHJOBS.key):
            self._sync(pj, pods)

    def _sync(self, pj: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        c = self.cluster
        ns, name = pj["metadata"]["namespace"], pj["metadata"]["name"]
        mine = {p["metadata"]["name"]: p for p in pods if _owned_by(p, pj)}
        specs = pj["spec"]["pytorchReplicaSpecs"]
        conds = pj.get("status", {}).get("conditions", [])
        finished = any(x["type"] in ("Succeeded", "Failed") and x["status"] == "True" for x in conds)
        if not finished and self._suspension(pj, mine, conds):
            return
        total = sum(r.get("replicas", 1) for r in specs.values())
        if not finished and not mine:
            for rtype, rspec in sorted(specs.items()):
                for i in range(rspec.get("replicas", 1)):
                    try:
                        self._create_replica(pj, rtype, i, rspec, total)
                    except ApiStatus as exc:  # the operator's pod control: an event, then a retry
                        if (pj["metadata"]["uid"], exc.message) not in self._refused:
                            self._refused.add((pj["metadata"]["uid"], exc.message))
                            c.record_event(pj, "Warning", "FailedCreatePod", f"Error creating: {exc.message}")
                        return
            c.record_event(pj, "Normal", "PyTorchJobCreated", f"PyTorchJob {name} is created.")
            return
        phases = {n: p["status"].get("phase") for n, p in mine.items()}
        master = phases.get(f"{name}-master-0")
        failed = [n for n, ph in phases.items() if ph == "Failed"]

        def status(obj: dict[str, Any]) -> None:
            st = obj.setdefault("status", {})
            cs = st.setdefault("conditions", [])
            _set_condition(cs, "Created", "True", "PyTorchJobCreated", f"PyTorchJob {name} is created.")
            st["replicaStatuses"] = {
                rt: {
                    "active": sum(
                        1
                        for n, ph in phases.items()
                        if f"-{rt.lower()}-" in n and ph in ("Pending", "Running")
                    ),
                    "succeeded": sum(
                        1 for n, ph in phases.items() if f"-{rt.lower()}-" in n and ph == "Succeeded"
                    ),
                    "failed": sum(1 for n, ph in phases.items() if f"-{rt.lower()}-" in n and ph == "Failed"),
                }
                for rt in specs
            }
            if finished:
                return
            if phases and all(ph == "Running" for ph in phases.values()):
                st.setdefault("startTime", now())
                _set_condition(cs, "Running", "True", "PyTorchJobRunning", f"PyTorchJob {name} is running.")
            if master == "Succeeded":
                _set_condition(cs, "Running", "False", "PyTorchJobSucceeded", "")
                _set_condition(
                    cs,
                    "Succeeded",
                    "True",
                    "PyTorchJobSucceeded",
                    f"PyTorchJob {name} is successfully completed.",
                )
                st["completionTime"] = now()
            elif failed:
                rtype = "Master" if f"{name}-master-0" in failed else "Worker"
                _set_condition(cs, "Running", "False", "PyTorchJobFailed", "")
                _set_condition(
                    cs,
                    "Failed",
                    "True",
                    "PyTorchJobFailed",
                    f"PyTorchJob {name} is failed because {len(failed)} {rtype} replica(s) failed.",
                )
                st["completionTime"] = now()

        c.update(PYTORCHJOBS.key, ns, name, status)

    def _suspension(self, pj: dict[str, Any], mine: dict[str, Any], conds: list[dict[str, Any]]) -> bool:
        """``runPolicy.suspend`` (Kueue's hold): the operator removes the job's pods and Services
        and sets ``Suspended``; on resume ``Suspended`` turns False and ``startTime`` restarts
        (training-operator's suspend semantics, kubeflow/trainer#1859). True while suspended."""
        c = self.cluster
        ns, name = pj["metadata"]["namespace"], pj["metadata"]["name"]
        was = any(x["type"] == "Suspended" and x["status"] == "True" for x in conds)
        if pj["spec"].get("runPolicy", {}).get("suspend"):
            for key in (PODS, SERVICES):
                for obj in c.items(key, ns):
                    if _owned_by(obj, pj):
                        with contextlib.suppress(ApiStatus):
                            c.delete(key, ns, obj["metadata"]["name"])
            if not was:
                cs = [*conds]
                _set_condition(
                    cs, "Suspended", "True", "PyTorchJobSuspended", f"PyTorchJob {name} is suspended."
                )
                c.update(
                    PYTORCHJOBS.key, ns, name, lambda o: o.setdefault("status", {}).update(conditions=cs)
                )
            return True
        if was:
            cs = [*conds]
            _set_condition(cs, "Suspended", "False", "PyTorchJobResumed", f"PyTorchJob {name} is resumed.")
            c.update(
                PYTORCHJOBS.key,
                ns,
                name,
                lambda o: o.setdefault("status", {}).update(conditions=cs, startTime=now()),
            )
        return False

    def _create_replica(
        self, pj: dict[str, Any], rtype: str, index: int, rspec: dict[str, Any], total: int
    ) -> None:
        c = self.cluster
        name, ns = pj["metadata"]["name"], pj["metadata"]["namespace"]
        rt = rtype.lower()
        pod = _pod_from_template(pj, rspec["template"], f"{name}-{rt}-{index}")
        labels = pod["metadata"].setdefault("labels", {})
        labels.update(
            {
                "training.kubeflow.org/job-name": name,
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/replica-type": rt,
                "training.kubeflow.org/replica-index": str(index),
            }
        )
        if rt == "master":
            labels["training.kubeflow.org/job-role"] = "master"
        restart = rspec.get("restartPolicy", "OnFailure")
        pod["spec"]["restartPolicy"] = "Never" if restart == "ExitCode" else restart
        nproc = pj["spec"].get("nprocPerNode", "auto")
        port = 23456
        for ctr in pod["spec"]["containers"]:
            for p in ctr.get("ports", []):
                if p.get("name") == "pytorchjob-port":
                    port = p["containerPort"]
        rank = 0 if rt == "master" else index + 1
        env = [
            ("PET_NNODES", str(total)),
            ("PET_NPROC_PER_NODE", nproc),
            ("PET_NODE_RANK", str(rank)),
            ("PET_MASTER_ADDR", f"{name}-master-0"),
            ("PET_MASTER_PORT", str(port)),
            ("MASTER_ADDR", f"{name}-master-0"),
            ("MASTER_PORT", str(port)),
            ("WORLD_SIZE", str(total * (int(nproc) if nproc.isdigit() else 1))),
            ("RANK", str(rank)),
            ("PYTHONUNBUFFERED", "1"),
        ]
        for ctr in pod["spec"]["containers"]:
            if ctr["name"] == "pytorch":
                have = {e["name"] for e in ctr.get("env", [])}
                ctr.setdefault("env", []).extend({"name": k, "value": v} for k, v in env if k not in have)
        c.create(PODS, ns, pod)
        svc = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": f"{name}-{rt}-{index}",
                "ownerReferences": [_owner(pj)],
                "labels": dict(labels),
            },
            "spec": {
                "clusterIP": "None",
                "selector": dict(labels),
                "ports": [{"name": "pytorchjob-port", "port": port}],
            },
        }
        c.create(SERVICES, ns, svc)
        c.record_event(pj, "Normal", "SuccessfulCreatePod", f"Created pod: {pod['metadata']['name']}")


class T9kJobController(Loop):
    """An approximation of T9k's PyTorchTrainingJob controller (no public source): one pod per
    replica, ``<job>-<type>-<i>``, running ``torchrun <extraOptions> <args>`` itself with the
    ``PET_*`` rendezvous settings (first replica = master); ``status.phase`` and conditions."""

    def reconcile(self) -> None:
        pods = self.cluster.items(PODS)
        for tj in self.cluster.items(T9KJOBS.key):
            self._sync(tj, pods)

    def _sync(self, tj: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        c = self.cluster
        ns, name = tj["metadata"]["namespace"], tj["metadata"]["name"]
        mine = [p for p in pods if _owned_by(p, tj)]
        if tj.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return
        if not mine:
            replicas = tj["spec"]["replicaSpecs"]
            total = sum(r.get("replicas", 1) for r in replicas)
            trc = tj["spec"].get("torchrunConfig", {})
            rank = 0
            for rspec in replicas:
                for i in range(rspec.get("replicas", 1)):
                    pod = _pod_from_template(tj, rspec["template"], f"{name}-{rspec['type']}-{i}")
                    pod["spec"]["restartPolicy"] = "Never"
                    if tj["spec"].get("scheduler", {}).get("t9kScheduler"):  # its queue's gang scheduler
                        pod["spec"]["schedulerName"] = T9K_SCHEDULER
                    ctr = pod["spec"]["containers"][0]
                    ctr["command"] = ["torchrun", *trc.get("extraOptions", [])]
                    ctr["env"] = [
                        *ctr.get("env", []),
                        *(
                            {"name": k, "value": v}
                            for k, v in (
                                ("PET_NNODES", str(total)),
                                ("PET_NPROC_PER_NODE", str(trc.get("procPerNode", "1"))),
                                ("PET_NODE_RANK", str(rank)),
                                ("PET_MASTER_ADDR", f"{name}-{replicas[0]['type']}-0"),
                                ("PET_MASTER_PORT", "29500"),
                                ("PET_MAX_RESTARTS", str(trc.get("maxRestarts", 0))),
                            )
                        ),
                    ]
                    c.create(PODS, ns, pod)
                    rank += 1
            c.update(T9KJOBS.key, ns, name, lambda o: o.setdefault("status", {}).update(phase="Pending"))
            return
        phases = [p["status"].get("phase") for p in mine]
        phase = (
            "Failed"
            if "Failed" in phases
            else "Succeeded"
            if all(ph == "Succeeded" for ph in phases)
            else "Running"
            if any(ph == "Running" for ph in phases)
            else "Pending"
        )

        def status(obj: dict[str, Any]) -> None:
            st = obj.setdefault("status", {})
            st["phase"] = phase
            cs = st.setdefault("conditions", [])
            if phase == "Running":
                _set_condition(cs, "Running", "True", "AllReplicasRunning")
            elif phase == "Succeeded":
                _set_condition(cs, "Completed", "True", "Succeeded", "all replicas succeeded")
            elif phase == "Failed":
                _set_condition(cs, "Failed", "True", "ReplicaFailed", "a replica failed")

        c.update(T9KJOBS.key, ns, name, status)


KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
T9K_SCHEDULER = "t9k-scheduler"


def kueue_webhook(kind: str, obj: dict[str, Any]) -> None:
    """Kueue's mutating webhook (an admission hook): a Job or PyTorchJob that names a queue is
    created suspended (``spec.suspend``; Kubeflow jobs ``spec.runPolicy.suspend``) until Kueue
    admits it."""
    if KUEUE_LABEL not in obj.get("metadata", {}).get("labels", {}):
        return
    if kind == "Job":
        obj["spec"]["suspend"] = True
    elif kind == "PyTorchJob":
        obj["spec"].setdefault("runPolicy", {})["suspend"] = True


def kueue_admit(cluster: FakeCluster, kind: str, ns: str, name: str) -> None:
    """Kueue admits a queued workload: it un-suspends it."""
    if kind == "Job":
        cluster.patch(BATCH_JOBS.key, ns, name, {"spec": {"suspend": False}})
    else:
        cluster.patch(PYTORCHJOBS.key, ns, name, {"spec": {"runPolicy": {"suspend": False}}})


class EndpointsController(Loop):
    """Each Service with a selector gets an ``Endpoints`` of the pods it selects that have an IP:
    what cluster DNS answers for ``<service>`` and ``<pod hostname>.<service>``."""

    def reconcile(self) -> None:
        c = self.cluster
        pods = c.items(PODS)
        services = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in c.items(SERVICES)}
        for ep in c.items(ENDPOINTS):
            if (ep["metadata"]["namespace"], ep["metadata"]["name"]) not in services:
                with contextlib.suppress(ApiStatus):
                    c.delete(ENDPOINTS, ep["metadata"]["namespace"], ep["metadata"]["name"])
        for (ns, name), svc in services.items():
            selector = svc["spec"].get("selector")
            if selector:
                self._sync(ns, name, svc, [p for p in pods if p["metadata"]["namespace"] == ns], selector)

    def _sync(
        self, ns: str, name: str, svc: dict[str, Any], pods: list[dict[str, Any]], selector: dict[str, str]
    ) -> None:
        match = label_matcher(",".join(f"{k}={v}" for k, v in selector.items()))
        addresses = []
        for p in pods:
            ready = any(
                x["type"] == "Ready" and x["status"] == "True" for x in p["status"].get("conditions", [])
            )
            live = p["status"].get("phase") in ("Pending", "Running") and p["status"].get("podIP")
            if (
                match(p["metadata"].get("labels", {}))
                and live
                and (ready or svc["spec"].get("publishNotReadyAddresses"))
            ):
                addr: dict[str, Any] = {
                    "ip": p["status"]["podIP"],
                    "targetRef": {"kind": "Pod", "name": p["metadata"]["name"], "namespace": ns},
                }
                if p["spec"].get("hostname") and p["spec"].get("subdomain") == name:
                    addr["hostname"] = p["spec"]["hostname"]
                addresses.append(addr)
        ports = [
            {"name": x.get("name", ""), "port": x.get("targetPort", x["port"]), "protocol": "TCP"}
            for x in svc["spec"].get("ports", [])
        ]
        subsets = (
            [{"addresses": sorted(addresses, key=lambda a: a["targetRef"]["name"]), "ports": ports}]
            if addresses
            else []
        )
        if self.cluster.get(ENDPOINTS, ns, name) is None:
            meta = {"name": name, "namespace": ns, "labels": svc["metadata"].get("labels", {})}
            self.cluster.create(
                ENDPOINTS, ns, {"apiVersion": "v1", "kind": "Endpoints", "metadata": meta, "subsets": subsets}
            )
        else:
            self.cluster.update(ENDPOINTS, ns, name, lambda ep: ep.update(subsets=subsets))


class GarbageCollector(Loop):
    """Deletes objects all of whose owners (by uid) are gone, as the cluster's GC does after a
    ``Background`` delete or when an ownerReference names an owner that no longer exists."""

    def reconcile(self) -> None:
        c = self.cluster
        with c.cond:
            live = {o["metadata"]["uid"] for o in c.objects.values()}
            orphans = [
                at
                for at, o in c.objects.items()
                if o["metadata"].get("ownerReferences")
                and not any(r.get("uid") in live for r in o["metadata"]["ownerReferences"])
            ]
        for key, ns, name in orphans:
            with contextlib.suppress(ApiStatus):
                c.delete(key, ns, name)


class TTLController(Loop):
    """Deletes a finished Job ``ttlSecondsAfterFinished`` after it finished (foreground, as the
    TTL-after-finished controller does)."""

    def reconcile(self) -> None:
        c = self.cluster
        for job in c.items(BATCH_JOBS.key):
            ttl = job["spec"].get("ttlSecondsAfterFinished")
            ended = [
                x.get("lastTransitionTime", "")
                for x in job.get("status", {}).get("conditions", [])
                if x["type"] in ("Complete", "Failed") and x["status"] == "True"
            ]
            if ttl is None or not ended:
                continue
            finished = calendar.timegm(time.strptime(ended[0], "%Y-%m-%dT%H:%M:%SZ"))
            if time.time() >= finished + ttl:
                with contextlib.suppress(ApiStatus):
                    c.delete(
                        BATCH_JOBS.key, job["metadata"]["namespace"], job["metadata"]["name"], "Foreground"
                    )


_SINGLE_NODE = ("ReadWriteOnce", "ReadWriteOncePod")


def _claims(pod: dict[str, Any]) -> set[str]:
    return {
        v["persistentVolumeClaim"]["claimName"]
        for v in pod["spec"].get("volumes", []) or []
        if v.get("persistentVolumeClaim")
    }


def attach_conflict(
    cluster: FakeCluster, pod: dict[str, Any], node: str, started: set[tuple[str, str]]
) -> str | None:
    """The attach/detach controller's Multi-Attach error when a single-node claim (its PVC
    object's ``accessModes``) of ``pod`` is in use on another node, else ``None``. In use: by a
    running pod (the notebook's) or one the kubelet started that has not ended."""
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    for claim in sorted(_claims(pod)):
        pvc = cluster.get(PVCS, ns, claim)
        if pvc is None or not set(pvc["spec"].get("accessModes", [])) & set(_SINGLE_NODE):
            continue
        users = [
            p["metadata"]["name"]
            for p in cluster.items(PODS, ns)
            if p["metadata"]["name"] != name
            and p["spec"].get("nodeName") not in (None, node)
            and claim in _claims(p)
            and (
                p.get("status", {}).get("phase") == "Running"
                or ((ns, p["metadata"]["name"]) in started and p["status"].get("phase") == "Pending")
            )
        ]
        if users:
            return (
                f'Multi-Attach error for volume "pvc-{pvc["metadata"]["uid"]}" '
                f"Volume is already used by pod(s) {', '.join(sorted(users))}"
            )
    return None


class ProcessKubelet(Loop):
    """Schedules pods onto one fake node and runs their containers as local processes.

    A pod for one of ``gang_schedulers`` (its ``schedulerName``) is not the default scheduler's:
    it stays unbound, as a gang scheduler leaves the pods of a job waiting in its queue, until
    ``release`` says that scheduler's queue let them go.

    ``pull_seconds``: images whose pull takes that long (``Pulling``, then ``Pulled``: the
    kubelet's events; the container waits in ``ContainerCreating`` meanwhile). ``scale_up``:
    (seconds, GPUs) of a cluster autoscaler that adds a node with that many GPUs for a pod no
    node fits (``TriggeredScaleUp`` on the pod, as cluster-autoscaler records it)."""

    def __init__(
        self,
        cluster: FakeCluster,
        gpus: int = 8,
        bad_images: tuple[str, ...] = (),
        image_paths: dict[str, str] | None = None,
        image_env: dict[str, dict[str, str]] | None = None,
        nodes: int = 1,
        gang_schedulers: tuple[str, ...] = (),
        pull_seconds: dict[str, float] | None = None,
        scale_up: tuple[float, int] | None = None,
    ) -> None:
        super().__init__(cluster)
        self.pull_seconds = dict(pull_seconds or {})
        self.scale_up = scale_up
        self._since: dict[tuple[str, str, str], float] = {}  # (ns, pod, what) -> when it began
        self.gang_schedulers = set(gang_schedulers)  # those not released hold their pods
        self.gpus = gpus
        self.bad_images = set(bad_images)
        # image -> the PATH its executables are on (default: this interpreter's dir, then ours)
        self.image_paths = dict(image_paths or {})
        # image -> its own ENV (a Dockerfile's), which the pod's env overrides name by name
        self.image_env = dict(image_env or {})
        self.nodes = [f"fake-node-{i + 1}" for i in range(nodes)]
        self.node = self.nodes[0]
        self._bound = 0  # pods bound so far: round-robin over the nodes
        self.procs: dict[tuple[str, str], subprocess.Popen[bytes]] = {}
        self.exec_env: dict[tuple[str, str], tuple[dict[str, str], str]] = {}  # for pods/exec
        self._killers: list[threading.Thread] = []
        self.handled: set[tuple[str, str]] = set()
        self.ports: dict[tuple[str, str], int] = {}
        self._port_lock = threading.Lock()
        self.sandbox = Path(tempfile.mkdtemp(prefix="fake-kubelet-"))
        cluster.on_delete.append(self._deleted)

    def stop(self) -> None:
        super().stop()
        for proc in list(self.procs.values()):
            self._kill(proc)
        for killer in self._killers:  # pods deleted just before: no process outlives the test
            killer.join()
        shutil.rmtree(self.sandbox, ignore_errors=True)  # the pods' emptyDirs go with their kubelet

    def reconcile(self) -> None:
        for pod in self.cluster.items(PODS):
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            if key in self.handled:
                continue
            if not pod["metadata"].get("ownerReferences"):
                self.handled.add(key)  # a bare pod (the notebook's own): its container is not ours to run
                continue
            if self._try_start(pod):
                self.handled.add(key)

    # -- a pod's life ------------------------------------------------------------------------------
    def _update(self, pod: dict[str, Any], fn: Any) -> None:
        self.cluster.update(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], fn)

    def _once(self, pod: dict[str, Any], tag: str) -> bool:
        """True the first time ``tag`` is seen for this pod (events are recorded once)."""
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"], tag)
        seen = getattr(self, "_seen", set())
        self._seen = seen
        if key in seen:
            return False
        seen.add(key)
        return True

    def release(self, scheduler: str) -> None:
        """The gang scheduler's queue lets its jobs go: their pods are bound and run."""
        self.gang_schedulers.discard(scheduler)

    def _try_start(self, pod: dict[str, Any]) -> bool:
        c = self.cluster
        ctr = pod["spec"]["containers"][0]
        if pod["spec"].get("schedulerName") in self.gang_schedulers:
            if self._once(pod, "queued"):
                queued = {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "pod group is not ready: its queue has not admitted it",
                }
                self._update(pod, lambda p: p["status"].update(phase="Pending", conditions=[queued]))
            return False
        gpus = int(ctr.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", "0"))
        node = self._pick_node(pod)
        if gpus > self.gpus or node is None:
            n = len(self.nodes)
            why = (
                "Insufficient nvidia.com/gpu"
                if gpus > self.gpus
                else "node(s) didn't match Pod's node affinity"
            )
            msg = (
                f"0/{n} nodes are available: {n} {why}. preemption: 0/{n} nodes are available: "
                f"{n} No preemption victims found for incoming pod."
            )
            if self._once(pod, "unschedulable"):
                self._update(
                    pod,
                    lambda p: p["status"].update(
                        phase="Pending",
                        conditions=[
                            {
                                "type": "PodScheduled",
                                "status": "False",
                                "reason": "Unschedulable",
                                "message": msg,
                                "lastTransitionTime": now(),
                            }
                        ],
                    ),
                )
                c.record_event(pod, "Warning", "FailedScheduling", msg)
            if not (gpus > self.gpus and self.scale_up and self._scale_up(pod, gpus)):
                return False
            node = self._pick_node(pod)
        if self._once(pod, "scheduled"):

            def bind(p: dict[str, Any]) -> None:
                p["spec"]["nodeName"] = node
                p["status"]["conditions"] = [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()}
                ]

            self._bound += 1
            self._update(pod, bind)
            ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
            c.record_event(pod, "Normal", "Scheduled", f"Successfully assigned {ns}/{name} to {node}")
        pod["spec"]["nodeName"] = node
        if not self._pulled(pod, ctr):
            return False
        if ctr["image"] in self.bad_images:
            if self._once(pod, "pull"):
                msg = f'Back-off pulling image "{ctr["image"]}"'
                self._update(
                    pod,
                    lambda p: p["status"].update(
                        containerStatuses=[
                            self._cstatus(ctr, {"waiting": {"reason": "ImagePullBackOff", "message": msg}})
                        ]
                    ),
                )
                c.record_event(pod, "Warning", "Failed", f'Failed to pull image "{ctr["image"]}": not found')
                c.record_event(pod, "Normal", "BackOff", msg)
            return False
        conflict = attach_conflict(c, pod, node, self.handled)
        if conflict:
            if self._once(pod, "attach"):
                waiting = {"waiting": {"reason": "ContainerCreating"}}
                self._update(
                    pod, lambda p: p["status"].update(containerStatuses=[self._cstatus(ctr, waiting)])
                )
                c.record_event(pod, "Warning", "FailedAttachVolume", conflict)
            return False
        for vol in pod["spec"].get("volumes", []):
            cm = vol.get("configMap")
            if cm and c.get(CONFIGMAPS, pod["metadata"]["namespace"], cm["name"]) is None:
                if self._once(pod, "mount"):
                    c.record_event(pod, "Warning", "FailedMount", f'configmap "{cm["name"]}" not found')
                return False
        threading.Thread(target=self._run_pod, args=(pod,), daemon=True).start()
        return True

    def _waited(self, pod: dict[str, Any], what: str, seconds: float) -> bool:
        """Whether ``what`` began for this pod at least ``seconds`` ago (it begins now if not yet)."""
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"], what)
        return time.monotonic() - self._since.setdefault(key, time.monotonic()) >= seconds

    def _scale_up(self, pod: dict[str, Any], wanted: int) -> bool:
        """The cluster autoscaler: a node that fits the pod, ``scale_up[0]`` seconds after it
        triggered the scale-up; whether the node is there."""
        assert self.scale_up is not None
        seconds, gpus = self.scale_up
        if wanted > gpus:
            return False
        if self._once(pod, "scale-up"):
            n = len(self.nodes)
            message = f"pod triggered scale-up: [{{gpu-pool {n}->{n + 1} (max: 8)}}]"
            self.cluster.record_event(pod, "Normal", "TriggeredScaleUp", message)
        if not self._waited(pod, "scale-up", seconds):
            return False
        self.nodes.append(f"fake-node-{len(self.nodes) + 1}")
        self.gpus = gpus
        return True

    def _pulled(self, pod: dict[str, Any], ctr: dict[str, Any]) -> bool:
        """Whether the pod's image is there: at once, or once its pull (``pull_seconds``) is done."""
        seconds, image = self.pull_seconds.get(ctr["image"]), ctr["image"]
        if seconds is None:
            return True
        if self._once(pod, "pulling"):
            waiting = {"waiting": {"reason": "ContainerCreating"}}
            self._update(pod, lambda p: p["status"].update(containerStatuses=[self._cstatus(ctr, waiting)]))
            self.cluster.record_event(pod, "Normal", "Pulling", f'Pulling image "{image}"')
        if not self._waited(pod, "pull", seconds):
            return False
        if self._once(pod, "pulled"):
            message = f'Successfully pulled image "{image}" in {seconds:g}s ({seconds:g}s including waiting)'
            self.cluster.record_event(pod, "Normal", "Pulled", message)
        return True

    def _pick_node(self, pod: dict[str, Any]) -> str | None:
        """Its ``nodeName``, else the node its required node affinity names, else the next one."""
        spec = pod["spec"]
        if spec.get("nodeName"):
            return str(spec["nodeName"])
        terms = (
            spec.get("affinity", {})
            .get("nodeAffinity", {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", {})
            .get("nodeSelectorTerms", [])
        )
        wanted = {
            v
            for t in terms
            for f in t.get("matchFields", [])
            if f.get("key") == "metadata.name" and f.get("operator") == "In"
            for v in f.get("values", [])
        }
        if terms:
            return next((n for n in self.nodes if n in wanted), None)
        return self.nodes[self._bound % len(self.nodes)]

    @staticmethod
    def _cstatus(
        ctr: dict[str, Any], state: dict[str, Any], restarts: int = 0, last: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        # client 37 insists on image, imageID, ready and restartCount.
        return {
            "name": ctr["name"],
            "image": ctr["image"],
            "imageID": f"fake://{ctr['image']}",
            "ready": "running" in state,
            "restartCount": restarts,
            "state": state,
            "lastState": last or {},
            "started": "running" in state,
        }

    def _volumes(self, pod: dict[str, Any], ctr: dict[str, Any]) -> dict[str, str]:
        """Mount path → host path for emptyDir and configMap volumes (PVCs are host paths)."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        vols = {v["name"]: v for v in pod["spec"].get("volumes", [])}
        out: dict[str, str] = {}
        for m in ctr.get("volumeMounts", []):
            vol = vols[m["name"]]
            if m["mountPath"] == "/dev/shm":
                continue
            if "emptyDir" in vol or "configMap" in vol:
                host = self.sandbox / ns / name / m["name"]
                host.mkdir(parents=True, exist_ok=True)
                if "configMap" in vol:
                    cm = self.cluster.get(CONFIGMAPS, ns, vol["configMap"]["name"]) or {}
                    for fname, text in cm.get("data", {}).items():
                        (host / fname).write_text(text)
                    for fname, data in cm.get("binaryData", {}).items():
                        (host / fname).write_bytes(base64.b64decode(data))
                out[m["mountPath"]] = str(host)
            elif "persistentVolumeClaim" in vol and not Path(m["mountPath"]).is_dir():
                raise RuntimeError(f"PVC mount {m['mountPath']} is not a local directory")
        return out

    def _env(self, pod: dict[str, Any], ctr: dict[str, Any]) -> dict[str, str]:
        meta = pod["metadata"]
        env = {
            "PATH": self.image_paths.get(ctr["image"])
            or os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/tmp"),
            "HOSTNAME": pod["spec"].get("hostname") or meta["name"],
            **self.image_env.get(ctr["image"], {}),
        }
        for item in ctr.get("env", []):
            if "value" in item:
                env[item["name"]] = _VAR.sub(
                    lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), item["value"]
                )
                continue
            path = item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")
            fm = _FIELD.match(path)
            if fm:
                env[item["name"]] = meta.get(fm.group(1), {}).get(fm.group(2), "")
            else:
                env[item["name"]] = {
                    "metadata.name": meta["name"],
                    "metadata.namespace": meta["namespace"],
                    "spec.nodeName": pod["spec"].get("nodeName", self.node),
                    "status.podIP": "127.0.0.1",
                }.get(path, "")
        for addr, port in (
            ("PET_MASTER_ADDR", "PET_MASTER_PORT"),
            ("MASTER_ADDR", "MASTER_PORT"),
            ("DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT"),  # a parameter server's scheduler
        ):
            if addr in env:
                key = (meta["namespace"], env[addr])
                with self._port_lock:  # pods start in parallel threads: one port per job
                    if key not in self.ports:
                        with socket.socket() as s:
                            s.bind(("127.0.0.1", 0))
                            self.ports[key] = s.getsockname()[1]
                env[addr], env[port] = "127.0.0.1", str(self.ports[key])
        return env

    def _run_pod(self, pod: dict[str, Any]) -> None:
        c = self.cluster
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        ctr = pod["spec"]["containers"][0]
        mounts = self._volumes(pod, ctr)

        def rewrite(text: str) -> str:
            for mount, host in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
                if text == mount or text.startswith(mount + "/"):
                    return host + text[len(mount) :]
            return text

        env = {k: rewrite(v) for k, v in self._env(pod, ctr).items()}
        argv = [rewrite(a) for a in [*ctr.get("command", []), *ctr.get("args", [])]]
        cwd = rewrite(ctr.get("workingDir") or str(self.sandbox))
        self.exec_env[(ns, name)] = (env, cwd)
        os.makedirs(cwd, exist_ok=True)
        policy = pod["spec"].get("restartPolicy", "Always")
        restarts = 0
        last: dict[str, Any] = {}
        while True:
            if c.get(PODS, ns, name) is None:
                return
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError:  # the runtime cannot exec the command: StartError, exit code 128
                term = self._start_error(argv[0])
                c.record_event(pod, "Warning", "Failed", f"Error: {term['message']}")
            else:
                c.record_event(pod, "Normal", "Started", f"Started container {ctr['name']}")
                term = self._run_container(pod, ctr, proc, restarts, last)
            code = term["exitCode"]
            if c.get(PODS, ns, name) is None:
                return
            if (policy == "Always") or (policy == "OnFailure" and code != 0):
                restarts += 1
                last = {"terminated": term}
                c.record_event(
                    pod, "Warning", "BackOff", f"Back-off restarting failed container {ctr['name']}"
                )
                time.sleep(0.2)
                continue
            phase = "Succeeded" if code == 0 else "Failed"
            self._update(
                pod,
                lambda p, t=term, r=restarts, lt=last, ph=phase: p["status"].update(
                    phase=ph,
                    conditions=[
                        *(x for x in p["status"].get("conditions", []) if x["type"] != "Ready"),
                        {"type": "Ready", "status": "False"},
                    ],
                    containerStatuses=[self._cstatus(ctr, {"terminated": t}, r, lt)],
                ),
            )
            return

    @staticmethod
    def _start_error(command: str) -> dict[str, Any]:
        message = (
            "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
            f'runc create failed: unable to start container process: exec: "{command}": '
            "executable file not found in $PATH: unknown"
        )
        return {"exitCode": 128, "reason": "StartError", "message": message, "finishedAt": now()}

    def _run_container(
        self,
        pod: dict[str, Any],
        ctr: dict[str, Any],
        proc: subprocess.Popen[bytes],
        restarts: int,
        last: dict[str, Any],
    ) -> dict[str, Any]:
        """Follow one run of the container; its ``terminated`` state."""
        c = self.cluster
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self.procs[(ns, name)] = proc
        c.open_log(ns, name)
        started = now()
        self._update(
            pod,
            lambda p, r=restarts, s=started, lt=last: p["status"].update(
                phase="Running",
                startTime=p["status"].get("startTime") or s,
                hostIP="127.0.0.1",
                podIP="127.0.0.1",
                conditions=[*p["status"].get("conditions", [])[:1], {"type": "Ready", "status": "True"}],
                containerStatuses=[self._cstatus(ctr, {"running": {"startedAt": s}}, r, lt)],
            ),
        )
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, b""):
            c.append_log(ns, name, line.rstrip(b"\n"))
        code = proc.wait()
        code = 128 - code if code < 0 else code  # killed by a signal: 128 + signal number
        c.close_log(ns, name)
        term = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": started,
            "finishedAt": now(),
        }
        if code and ctr.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            term["message"] = self._log_tail(ns, name)
        return term

    def _log_tail(self, ns: str, name: str) -> str:
        """What the kubelet keeps of a failed container's output: its last 80 lines or 2048 bytes."""
        with self.cluster.cond:
            lines = [ln for _, ln in self.cluster.logs[(ns, name)].lines[-80:]]
        return b"\n".join(lines)[-2048:].decode("utf-8", "replace")

    def evict(self, ns: str, name: str) -> None:
        """A disruption (a drain, a preemption): the pod gets the ``DisruptionTarget`` condition,
        then its processes are stopped, so it ends ``Failed`` with it; a Job's podFailurePolicy
        decides whether that failure counts."""
        condition = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
        self.cluster.update(
            PODS, ns, name, lambda p: p["status"].setdefault("conditions", []).append(condition)
        )
        proc = self.procs.get((ns, name))
        if proc is not None:
            self._kill(proc)

    def exec(self, ns: str, name: str, argv: list[str]) -> tuple[int, bytes, bytes] | None:
        """Run ``argv`` "in" a running pod (with its env and working dir): exit code, stdout,
        stderr; None when the pod does not run."""
        proc, where = self.procs.get((ns, name)), self.exec_env.get((ns, name))
        if proc is None or proc.poll() is not None or where is None:
            return None
        env, cwd = where
        try:
            done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, timeout=60, check=False)
        except FileNotFoundError:
            return 127, b"", f"exec: {argv[0]!r}: executable file not found in $PATH".encode()
        return done.returncode, done.stdout, done.stderr

    def usage(self, ns: str, name: str) -> dict[str, dict[str, str]] | None:
        """What metrics-server would report of a running pod: CPU (average since its start, in
        nanocores) and resident memory of its processes; None when it does not run."""
        import psutil

        proc = self.procs.get((ns, name))
        if proc is None or proc.poll() is not None:
            return None
        try:
            root = psutil.Process(proc.pid)
            tree = [root, *root.children(recursive=True)]
            cpu = sum(sum(p.cpu_times()[:2]) for p in tree) / max(1e-3, time.time() - root.create_time())
            rss = sum(p.memory_info().rss for p in tree)
        except psutil.Error:
            return None
        return {"trainer": {"cpu": f"{int(cpu * 1e9)}n", "memory": f"{rss // 1024}Ki"}}

    def _deleted(self, key: str, obj: dict[str, Any]) -> None:
        if key != PODS:
            return
        proc = self.procs.pop((obj["metadata"]["namespace"], obj["metadata"]["name"]), None)
        if proc is not None:
            killer = threading.Thread(target=self._kill, args=(proc,), daemon=True)
            self._killers.append(killer)
            killer.start()

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM the pod's process group, SIGKILL after a short grace period."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(3)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class ToyCluster:
    """Fake API server + controllers + process kubelet, as a context manager."""

    def __init__(
        self,
        version: tuple[int, int] = (1, 33),
        install: tuple[str, ...] = (),
        pod_metrics: bool = False,
        kueue: bool = False,
        resume_delay: float = 0.0,
        **kubelet: Any,
    ) -> None:
        from .fakeapi import FakeApiServer

        self.cluster = FakeCluster(version, install)
        self.server = FakeApiServer(self.cluster)
        if kueue:  # its webhook suspends queued workloads; tests admit them (kueue_admit)
            self.cluster.admission.append(kueue_webhook)
        self.loops: list[Loop] = [
            IndexedJobController(self.cluster, resume_delay),
            EndpointsController(self.cluster),
            GarbageCollector(self.cluster),
            TTLController(self.cluster),
            ProcessKubelet(self.cluster, **kubelet),
        ]
        if pod_metrics:  # a metrics-server: the metrics API is served
            self.cluster.pod_metrics = self.kubelet.usage
        self.cluster.pod_exec = self.kubelet.exec
        if "pytorchjob" in install:
            self.loops.append(PyTorchJobController(self.cluster))
        if "t9k" in install:
            self.loops.append(T9kJobController(self.cluster))

    @property
    def kubelet(self) -> ProcessKubelet:
        return next(loop for loop in self.loops if isinstance(loop, ProcessKubelet))

    def __enter__(self) -> ToyCluster:
        self.server.__enter__()
        for loop in self.loops:
            loop.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for loop in self.loops:
            loop.stop()
        self.server.__exit__(*exc)
