"""NVML in the resources view: a running job's rank under a matmul load, read through the job
layer (what ``GET jobs/<id>/resources`` answers): its GPU's utilisation, memory and name."""

from __future__ import annotations

import time
from typing import Any

from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.payloads.monitoring import ResourceSample

from .report import Check
from .session import Session, check

# Matmuls until the check says stop (a file appears) or GC_LOAD["seconds"] pass.
LOAD = """import os, json, time
device = gc_device()
dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
a = torch.randn(GC_LOAD["size"], GC_LOAD["size"], device=device, dtype=dtype)
print("GC", json.dumps({
    "loading": str(a.device),
    "name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
}), flush=True)
deadline, rounds = time.time() + GC_LOAD["seconds"], 0
while time.time() < deadline and not os.path.exists(os.environ["GC_STOP"]):
    for _ in range(10):
        b = a @ a
    if device.type == "cuda":
        torch.cuda.synchronize()
    rounds += 1
print("GC", json.dumps({"rounds": rounds, "stopped": os.path.exists(os.environ["GC_STOP"])}))
"""
INTERVAL = 0.5  # --monitor-interval: samples come four times as often as by default


def _loaded(sample: ResourceSample, gpu: bool) -> bool:
    """A sample that shows the load: a busy GPU with memory in use, or (CPU mode) a busy CPU."""
    if not gpu:
        return sample.cpu_percent > 0
    return bool(
        sample.gpus
        and sample.gpus[0].util_percent > 0
        and sample.gpus[0].mem_used_bytes > 0
        and (sample.gpu_mem_bytes or 0) > 0
    )


@check(
    "nvml-resources", "NVML in the resources view of a running GPU job: utilisation, memory, the GPU's name"
)
def nvml_resources(s: Session, c: Check) -> None:
    size, seconds = (8192, 90) if s.gpu else (256, 60)
    s.cell(f"GC_LOAD = {{'size': {size}, 'seconds': {seconds}}}")
    stop = s.base / "stop-load"
    flags = f"--gpus 1 --detach --monitor-interval {INTERVAL} --env GC_STOP={stop}"
    launched = s.distrun(flags, LOAD, "gc-load")
    if launched.job_id is None or launched.cell.error:
        c.expect("the load job started", False, launched.cell.error or launched.cell.text)
        return
    job = s.job(launched.job_id)
    try:
        found, samples, waited = _wait_for_load(s, launched.job_id, deadline=time.monotonic() + 60)
    finally:
        stop.touch()
    c.figure("samples_read", samples)
    c.figure("seconds_to_a_loaded_sample", round(waited, 2))
    c.expect("the view has samples of the running rank", samples > 0, f"{samples} samples")
    c.expect(
        "a sample shows the rank under load", found is not None, "none within 60 s" if found is None else ""
    )
    status = job.wait(timeout=60)
    ended = status.phase is JobPhase.SUCCEEDED
    if not ended:
        s.keep_evidence(c, launched.job_id, launched.cell)
    c.expect("the load job ended when told to: Succeeded", ended, status.phase.value)
    mark = s.mark(c, launched.job_id, "loading")
    if found is None or not mark:
        return
    c.figure("cpu_percent", found.cpu_percent)
    if not s.gpu:
        c.expect(
            "no GPU fields where the rank has no GPU (absent, not 0)",
            found.gpus is None and found.gpu_mem_bytes is None,
        )
    gpu: dict[str, Any] = {} if not found.gpus else vars(found.gpus[0])
    c.figure("gpu", gpu or None)
    c.figure("rank_gpu_mem_bytes", found.gpu_mem_bytes)
    c.expect(
        "the rank's GPU utilisation is above 0",
        gpu.get("util_percent", 0) > 0,
        gpu.get("util_percent"),
        gpu=True,
    )
    c.expect(
        "the GPU's memory in use is above 0",
        gpu.get("mem_used_bytes", 0) > 0,
        gpu.get("mem_used_bytes"),
        gpu=True,
    )
    c.expect(
        "the rank's own GPU memory is above 0", (found.gpu_mem_bytes or 0) > 0, found.gpu_mem_bytes, gpu=True
    )
    c.expect(
        "the view names the GPU as torch does",
        bool(gpu.get("name")) and gpu.get("name") == mark["name"],
        {"view": gpu.get("name"), "torch": mark["name"]},
        gpu=True,
    )


def _wait_for_load(s: Session, job_id: str, deadline: float) -> tuple[ResourceSample | None, int, float]:
    """Read the job's resources until rank-0 has a sample that shows the load: that sample (None
    at the deadline), how many samples were read, and the seconds it took."""
    start, since, count = time.monotonic(), None, 0
    job = s.job(job_id)
    while time.monotonic() < deadline:
        answer = job.resources(since)
        since = answer.now
        rank = answer.replicas.get("rank-0")
        for sample in rank.samples if rank else []:
            count += 1
            if _loaded(sample, s.gpu):
                return sample, count, time.monotonic() - start
        if job.status().is_terminal:
            break
        time.sleep(INTERVAL / 2)
    return None, count, time.monotonic() - start
