"""What a job inherits from the notebook's own pod: decisions that follow the notebook container.

Pure functions over the pod as the API returns it (plain dicts); finding the pod is the backend's.
"""

from __future__ import annotations

from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"


def container_gpus(container: dict[str, Any]) -> int:
    """The container's ``nvidia.com/gpu`` limit (0 when it has none or it is not a number)."""
    limit = str((container.get("resources") or {}).get("limits", {}).get(GPU_RESOURCE, "0"))
    return int(limit) if limit.isdigit() else 0


def choose_accelerator(accelerator: str, container: dict[str, Any] | None) -> tuple[bool, str]:
    """Whether the pods get GPUs, and why (shown in the dry run and kept in the job's request).

    ``auto`` follows the notebook container: a GPU notebook gets GPU pods, anything else CPU
    processes, so a bare ``%%distrun`` schedules on a CPU-only cluster.
    """
    if accelerator == "gpu":
        return True, "--accelerator gpu"
    if accelerator == "cpu":
        return False, "--accelerator cpu"
    if container is None:
        return False, "no notebook pod to follow; pass --accelerator gpu for GPUs"
    gpus = container_gpus(container)
    if gpus:
        return True, f"the notebook container has an {GPU_RESOURCE} limit ({gpus})"
    return False, f"the notebook container has no {GPU_RESOURCE} limit; pass --accelerator gpu for GPUs"
