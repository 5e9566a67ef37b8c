"""What this machine gives a local job: its GPUs, decided in one place (``job_gpus``), and its CPUs.

``--accelerator auto`` (the default) runs one process per visible GPU, and CPU processes (gloo)
where none is visible; ``cpu`` forces CPU processes; ``gpu`` asks for GPUs (the backend refuses
it where there are none). The local backend's checks and dry run, and the pitfall checks before a
launch (``api.job_target``), all ask ``job_gpus``.
"""

from __future__ import annotations

import os


def visible_gpus() -> list[str]:
    """GPU ids this process may use: ``CUDA_VISIBLE_DEVICES`` if set, else the driver's list."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    try:
        return [str(i) for i in range(len(os.listdir("/proc/driver/nvidia/gpus")))]
    except OSError:
        return []


def job_gpus(accelerator: str) -> list[str]:
    """The GPUs a local job of ``--accelerator`` runs on; [] means CPU processes (gloo)."""
    return [] if accelerator == "cpu" else visible_gpus()


def cpu_count() -> int:
    """CPUs this process may run on (its affinity, e.g. a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
