"""Launching on the GPU: a ``%%distrun --gpus 1`` cell (NCCL, ``cuda:0``, an all-reduce on a CUDA
tensor, ``--accelerator auto`` and its dry run), ranks on CPU processes beside the GPU (gloo), and
the DDP pitfall checks where a GPU is visible."""

from __future__ import annotations

import os
import re

from jupyter_disttrain.backends.local.devices import visible_gpus
from jupyter_disttrain.payloads.jobs import JobSummary

from .report import Check
from .session import Session, check

# One rank per GPU on NCCL where there is one (NCCL refuses two ranks on one GPU), gloo on CPU.
CELL = """import os, json
device = gc_device()
dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
t = torch.full((1 << 20,), float(dist.get_rank() + 1), device=device)
dist.all_reduce(t)
print("GC", json.dumps({
    "backend": dist.get_backend(),
    "world": dist.get_world_size(),
    "device": str(t.device),
    "sum": t[0].item(),
    "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    "nccl": str(torch.cuda.nccl.version()) if device.type == "cuda" else None,
}))
dist.destroy_process_group()
"""
GLOO = """import os, json
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print("GC", json.dumps({
    "backend": dist.get_backend(),
    "sum": t.item(),
    "cuda": torch.cuda.is_available(),
    "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
}))
dist.destroy_process_group()
"""
# Written for a GPU: every CUDA call unguarded, as a GPU-only notebook has them.
GPU_ONLY = """local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = torch.nn.Linear(8, 8).cuda(local_rank)
"""
_DEVICE = re.compile(r"\(device: (\w+)\)")
_NO_GPU_WARNING = "[silence: --no-check cuda-without-gpu]"


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


@check(
    "distrun-cell",
    "a %%distrun --gpus 1 cell in a real kernel: NCCL, cuda:0, a CUDA all-reduce, --accelerator auto",
)
def distrun_cell(s: Session, c: Check) -> None:
    dry = s.cell(f"%%distrun --gpus 1 --accelerator auto --name gc-dry --dry-run\n{CELL}")
    found = _DEVICE.search(dry.text)
    device = c.figure("dry_run_device", found.group(1) if found else None)
    c.expect(
        "the dry run prints the launch request", dry.error is None and found is not None, dry.error or ""
    )
    c.expect("the dry run says the job runs on the GPU (device: cuda)", device == "cuda", device, gpu=True)
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]  # the machine's first GPU
    c.expect(
        f"the dry run gives the rank the first GPU (CUDA_VISIBLE_DEVICES={first})",
        f"CUDA_VISIBLE_DEVICES={first} " in dry.text,
        re.findall(r"CUDA_VISIBLE_DEVICES=\S*", dry.text)[:1],
        gpu=True,
    )
    launched = s.distrun("--gpus 1 --accelerator auto", CELL, "gc-cell")
    c.figure("cell_s", round(launched.cell.seconds, 3))
    if not s.succeeded(c, launched, "the cell's job") or launched.job_id is None:
        return
    record = s.record(launched.job_id)
    summary = JobSummary.of(record, s.status(launched.job_id))
    c.expect(
        "--accelerator auto chose the GPU",
        record.request.get("device") == "cuda",
        record.request.get("device"),
        gpu=True,
    )
    c.expect("the job list counts its GPU", summary.gpus == 1, f"gpus={summary.gpus}", gpu=True)
    mark = s.mark(c, launched.job_id, "backend")
    if not mark:
        return
    c.figure("rank", mark)
    c.expect("the rank's process group is NCCL", mark["backend"] == "nccl", mark["backend"], gpu=True)
    c.expect("the rank is on cuda:0", mark["device"] == "cuda:0", mark["device"], gpu=True)
    c.expect(
        "the all-reduce summed the ranks' tensors", mark["sum"] == 1.0 and mark["world"] == 1, mark["sum"]
    )
    c.expect(
        "the all-reduce ran on a CUDA tensor", mark["device"].startswith("cuda"), mark["device"], gpu=True
    )
    gpus = _gpu_count()
    product = visible_gpus()
    c.expect(
        "the local backend sees the GPUs torch sees",
        len(product) == gpus,
        {"backend": product, "torch": gpus},
    )
    too_many = s.cell(f"%%distrun --gpus {gpus + 1} --name gc-too-many --dry-run\n{CELL}")
    c.expect(
        f"--gpus {gpus + 1} on a machine with {gpus} GPU(s) is refused, naming them",
        too_many.error is not None and f"this machine has {gpus}" in too_many.error,
        (too_many.error or too_many.text).strip().splitlines()[-1:],
        gpu=True,
    )


@check("gloo-ranks", "two ranks as CPU processes with gloo (--accelerator cpu) where a GPU is visible")
def gloo_ranks(s: Session, c: Check) -> None:
    launched = s.distrun("--gpus 2 --accelerator cpu --oversubscribe", GLOO, "gc-gloo")
    c.figure("cell_s", round(launched.cell.seconds, 3))
    if not s.succeeded(c, launched, "the 2-rank gloo job") or launched.job_id is None:
        return
    record = s.record(launched.job_id)
    c.expect(
        "the request runs it on CPU", record.request.get("device") == "cpu", record.request.get("device")
    )
    marks = [s.mark(c, launched.job_id, "sum", f"rank-{r}") for r in (0, 1)]
    if not all(marks):
        return
    c.expect("both ranks are in a gloo group", all(m["backend"] == "gloo" for m in marks), marks)
    c.expect(
        "the all-reduce summed both ranks (3.0)",
        all(m["sum"] == 3.0 for m in marks),
        [m["sum"] for m in marks],
    )
    c.expect(
        "no GPU is visible to CPU ranks",
        all(m["visible"] == "" and not m["cuda"] for m in marks),
        [(m["visible"], m["cuda"]) for m in marks],
    )


@check("pitfalls", "DDP pitfall checks: no cuda-without-gpu warning where a GPU is visible")
def pitfalls(s: Session, c: Check) -> None:
    auto = s.cell(f"%%distrun --gpus 1 --name gc-pitfall --dry-run\n{GPU_ONLY}")
    cpu = s.cell(f"%%distrun --gpus 1 --accelerator cpu --name gc-pitfall --dry-run\n{GPU_ONLY}")
    c.expect("both dry runs ran", auto.error is None and cpu.error is None, auto.error or cpu.error or "")
    warned_auto, warned_cpu = _NO_GPU_WARNING in auto.text, _NO_GPU_WARNING in cpu.text
    c.expect(
        "no cuda-without-gpu warning with a GPU visible", not warned_auto, _warnings(auto.text), gpu=True
    )
    if not s.gpu:
        c.expect("cuda-without-gpu where no GPU is visible", warned_auto, _warnings(auto.text))
    c.expect("cuda-without-gpu with --accelerator cpu", warned_cpu, _warnings(cpu.text))
    c.expect(
        "no cuda-without-device warning (the cell sets the local rank's device)",
        "cuda-without-device" not in auto.text,
        _warnings(auto.text),
    )


def _warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("warning:")]
