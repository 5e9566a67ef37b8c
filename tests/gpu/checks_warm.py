"""Warm start on a GPU machine: the zygote never initialises CUDA (read from its process), each
warm rank does, three warm runs in a row succeed after the kernel itself ran a CUDA op, and the
first training step comes sooner than raw torchrun's."""

from __future__ import annotations

import os
import statistics
from typing import Any

from .report import Check
from .session import Session, check, stdout_marks

# A rank's first training step on its device: the process group, DDP, one optimizer step.
FIRST_STEP = """import os, json, time
at_start = torch.cuda.is_initialized()
device = gc_device()
dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
net = torch.nn.Linear(1024, 1024).to(device)
model = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
opt.zero_grad()
model(torch.randn(64, 1024, device=device)).square().mean().backward()
opt.step()
if device.type == "cuda":
    torch.cuda.synchronize()
print("GC", json.dumps({
    "first_step": time.time(),
    "cuda_at_start": at_start,
    "cuda_after": torch.cuda.is_initialized(),
    "device": str(device),
}))
dist.destroy_process_group()
"""
# The kernel's own work before the runs: a CUDA op where there is a GPU, else a matmul on every
# core (threads in the kernel: what makes a fork of the kernel hang, the reason it is never forked).
KERNEL_OP = """if torch.cuda.is_available():
    (torch.ones(512, 512, device="cuda") @ torch.ones(512, 512, device="cuda")).sum().item()
else:
    torch.set_num_threads(os.cpu_count())
    (torch.randn(512, 512) @ torch.randn(512, 512)).sum().item()
print("GC", json.dumps({"pid": os.getpid(), "cuda": torch.cuda.is_initialized()}))
"""
WARM_RUNS = 3


def cuda_in_process(pid: int) -> dict[str, Any]:
    """What a process shows of CUDA from outside: the NVIDIA device files it holds open (the
    driver opens them when CUDA is initialised in it) and whether the driver's library is mapped."""
    devices = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("/dev/nvidia"):
            devices.add(target)
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
        libcuda = any("libcuda.so" in line for line in f)
    return {"device_files": sorted(devices), "libcuda_mapped": libcuda}


@check(
    "warm-start",
    "warm start on a GPU machine: a CUDA-free zygote, CUDA in each warm rank, runs after a kernel CUDA op",
)
def warm_start(s: Session, c: Check) -> None:
    op = s.cell(KERNEL_OP)
    kernel = stdout_marks(op.text)[-1] if op.error is None else {}
    c.expect("the kernel ran its own op", op.error is None, op.error or kernel)
    c.expect("the kernel initialised CUDA itself", bool(kernel.get("cuda")), kernel, gpu=True)
    if kernel:
        seen = cuda_in_process(int(kernel["pid"]))
        c.figure("kernel_cuda_seen", seen)
        # The reading below would prove nothing if it could not see CUDA where it is.
        c.expect("the process reading sees CUDA in the kernel", bool(seen["device_files"]), seen, gpu=True)
    zygote = s.zygote()
    c.expect("a warm zygote is ready", bool(zygote), zygote.get("state"))
    if not zygote:
        return
    firsts = []
    last_job = None
    for i in range(WARM_RUNS):
        launched = s.distrun("--gpus 1", FIRST_STEP, "gc-warm")
        if not s.succeeded(c, launched, f"warm run {i + 1}") or launched.job_id is None:
            return
        last_job = launched.job_id
        how = s.started(launched.job_id)
        c.expect(f"warm run {i + 1} was forked from the zygote", "(warm:" in how, how)
        mark = s.mark(c, launched.job_id, "first_step")
        if not mark:
            return
        c.expect(f"warm run {i + 1}'s rank started without CUDA initialised", not mark["cuda_at_start"], mark)
        c.expect(f"warm run {i + 1}'s rank initialised CUDA", bool(mark["cuda_after"]), mark, gpu=True)
        firsts.append(mark["first_step"] - launched.cell.sent)
    after = s.zygote()
    c.expect(
        "the same zygote served every run (it stayed fork-safe: CUDA never initialised in it)",
        after.get("pid") == zygote["pid"],
        {"before": zygote["pid"], "after": after.get("pid")},
    )
    seen = cuda_in_process(int(zygote["pid"]))
    c.figure("zygote_cuda_seen", seen)
    c.expect(
        "the zygote holds no NVIDIA device file (CUDA never initialised in it)",
        not seen["device_files"],
        seen,
    )
    assert last_job is not None
    raw = []
    for _ in range(2 if s.gpu else 1):
        out, started = s.torchrun(last_job, nproc=1)
        raw.append(stdout_marks(out)[0]["first_step"] - started)
    warm_first, raw_first = statistics.median(firsts), statistics.median(raw)
    c.figure("warm_first_step_s", [round(x, 3) for x in firsts])
    c.figure("torchrun_first_step_s", [round(x, 3) for x in raw])
    ratio = c.figure("first_step_ratio_warm_to_torchrun", round(warm_first / raw_first, 3))
    c.expect("a warm run reaches its first step sooner than raw torchrun", ratio < 1.0, ratio)
