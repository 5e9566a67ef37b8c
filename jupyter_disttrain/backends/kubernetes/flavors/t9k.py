"""T9k ``PyTorchTrainingJob``: the controller runs ``torchrun <options> <args>`` itself.

Without our pod wrapper there are no log files nor exit records in the job dir: the output is
in ``pods/log`` only, and the workload's ``status.phase`` says how it ended.
"""

from __future__ import annotations

from typing import Any

from ....model.specs import Condition, JobPhase, JobSpec
from .. import manifests as mf
from ..client import T9KJOBS
from ..options import KubeOptions
from .base import End, Flavor, ReplicaGroup


class T9kJob(Flavor):
    name = "t9k"
    resource = T9KJOBS
    runs_wrapper = False

    def replica_groups(self, spec: JobSpec) -> list[ReplicaGroup]:
        return [ReplicaGroup("worker", spec.nodes)]

    def replica_of(self, job_id: str, pod: dict[str, Any]) -> tuple[str, str, int]:
        name = pod.get("metadata", {}).get("name", "")
        short = name[len(job_id) + 1 :] if name.startswith(job_id + "-") else name
        role, _, idx = short.rpartition("-")
        return short, role or "worker", int(idx) if idx.isdigit() else 0

    def workload_objects(
        self, spec: JobSpec, job_id: str, opts: KubeOptions, place: mf.Placement
    ) -> list[dict[str, Any]]:
        pod = self.pod_template(spec, job_id, opts, place)
        container = pod["spec"]["containers"][0]
        container["command"] = ["python"]  # ignored by the controller while torchrunConfig is on
        # The controller runs "torchrun <options> <args>" without our pod wrapper; with
        # --no-python each rank starts from our entry script, which puts the notebook's dir in
        # front of the image's PYTHONPATH as every other flavour's pod does.
        container["args"] = mf.rank_command(spec, place)
        body: dict[str, Any] = {
            "torchrunConfig": {
                "enabled": True,
                "procPerNode": str(spec.nproc_per_node),
                "maxRestarts": 0,
                "rdzvBackend": "c10d",
                "extraOptions": ["--tee", "3", "--no-python"],
            },
            "runPolicy": {"backoffLimit": spec.max_restarts, "cleanUpPolicy": "Unfinished"},
            "replicaSpecs": [
                {
                    "type": g.role,
                    "replicas": g.count,
                    "restartPolicy": self.restart_policy(spec),
                    "template": pod,
                }
                for g in self.replica_groups(spec)
            ],
        }
        if opts.queue:
            body["scheduler"] = {"t9kScheduler": {"queue": opts.queue}}
        return [self.workload(job_id, opts, place, body)]

    def gang_queue(self, workload: dict[str, Any]) -> str | None:
        queue: str | None = workload.get("spec", {}).get("scheduler", {}).get("t9kScheduler", {}).get("queue")
        return queue

    def workload_end(self, conds: list[Condition], wst: dict[str, Any]) -> End | None:
        # T9k also says it in status.phase, which wins over the conditions when it succeeded.
        if wst.get("phase") == "Succeeded":
            return JobPhase.SUCCEEDED, "Succeeded", None
        end = super().workload_end(conds, wst)
        if end is None and wst.get("phase") == "Failed":
            return JobPhase.FAILED, "Failed", None
        return end
