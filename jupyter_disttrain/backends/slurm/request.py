"""The Slurm backend's launch request, typed: what ``--dry-run`` shows and ``job.json`` keeps.

It is the shared launcher's request (``backends/agents/request.py``; the launcher reads it as
one: ``agents`` are the per-node ``srun`` commands, ``monitor_interval`` is 0 because each
node's agent samples its own ranks) plus what is Slurm's own: how the job reaches the cluster
and the batch script.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..agents.request import LocalRequest

BATCH = "batch"  # a new job: sbatch, the launcher runs as the batch script on the first node
KEPT = "kept"  # in a kept batch job (kept.py): the launcher runs as a step of it, on its first node
STEP = "step"  # inside an allocation: the launcher runs beside the kernel, its agents are job steps


@dataclass(frozen=True)
class SlurmRequest(LocalRequest):
    mode: str = BATCH
    allocation: str | None = None  # STEP: the allocation the steps run in (its SLURM_JOB_ID)
    sbatch: list[str] = field(default_factory=list)  # BATCH: the sbatch command line
    batch_script: str = ""  # BATCH: slurm/batch.sh, what sbatch runs
    slurm_version: str = ""  # of the client commands that laid the job out
    node_monitor_interval: float = 0.0  # seconds between each node agent's resource samples
    why: str = ""  # how the backend and the mode were chosen, for the dry run and the details
    # Warm (``warm``: the keeper's socket, the fingerprint; ``warmstart.py``): each node's warm step
    # command line, started once by the keeper when the node has none, and how long it stays idle.
    warm_steps: list[list[str]] = field(default_factory=list)
    # BATCH with --keep-warm: the job's shape and idle time, recorded once its job ended (kept.py).
    keep: dict[str, Any] = field(default_factory=dict)
    relay: list[str] = field(default_factory=list)  # KEPT: the srun of the launcher's step

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SlurmRequest:
        base = LocalRequest.from_json(data)
        return cls(
            **{k: getattr(base, k) for k in LocalRequest.__dataclass_fields__},
            mode=str(data.get("mode", BATCH)),
            allocation=data.get("allocation"),
            sbatch=[str(a) for a in data.get("sbatch", [])],
            batch_script=str(data.get("batch_script", "")),
            slurm_version=str(data.get("slurm_version", "")),
            node_monitor_interval=float(data.get("node_monitor_interval", 0.0)),
            why=str(data.get("why", "")),
            warm_steps=[[str(a) for a in argv] for argv in data.get("warm_steps", [])],
            keep=dict(data.get("keep") or {}),
            relay=[str(a) for a in data.get("relay", [])],
        )
