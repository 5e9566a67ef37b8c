"""Training on the GPU: a bf16 loop's throughput through ``%%distrun`` against raw torchrun on the
same script, and a checkpoint of CUDA tensors: listed, resumed with ``--resume JOB:latest``, and
loaded by its load cell in a kernel that has no GPU."""

from __future__ import annotations

import json
import os
import statistics

from .kernel import Kernel
from .report import Check
from .session import Session, check, stdout_marks

# A model that keeps the GPU busy: four square bf16 layers, timed after a warm-up.
TRAIN = """import os, json, time
device = gc_device()
dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
width, batch = GC_TRAIN["width"], GC_TRAIN["batch"]
torch.manual_seed(0)
layers = []
for _ in range(4):
    layers += [torch.nn.Linear(width, width, device=device, dtype=torch.bfloat16), torch.nn.GELU()]
net = torch.nn.Sequential(*layers)
model = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(batch, width, device=device, dtype=torch.bfloat16)


def train(steps):
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        model(x).float().square().mean().backward()
        opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize()


train(GC_TRAIN["warmup"])
t0 = time.perf_counter()
train(GC_TRAIN["steps"])
elapsed = time.perf_counter() - t0
rate = GC_TRAIN["steps"] / elapsed
print("GC", json.dumps({"steps_per_s": rate, "device": str(x.device), "dtype": str(x.dtype)}))
dist.destroy_process_group()
"""
GPU_TRAIN = {"width": 8192, "batch": 8192, "warmup": 10, "steps": 150}
# CPU mode runs the same loop small: the path, not the speed (a loaded 2-core machine's figures
# mean nothing; the target is asserted on a GPU only).
CPU_TRAIN = {"width": 32, "batch": 16, "warmup": 1, "steps": 10}
TARGET = 0.99

NET = """class GcNet(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x):
        return self.fc(x)
"""
# Three steps on the device, then rank 0 saves a checkpoint of its CUDA tensors.
SAVE = """import os, json
device = gc_device()
torch.manual_seed(0)
model = GcNet(16).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, 4):
    opt.zero_grad()
    model(torch.randn(8, 16, device=device)).square().mean().backward()
    opt.step()
state = model.state_dict()
path = os.path.join(os.environ["DISTTRAIN_CHECKPOINT_DIR"], f"step_{step}.pt")
if int(os.environ["RANK"]) == 0:
    torch.save({"model": state, "step": step}, path)
print("GC", json.dumps({
    "saved_step": step,
    "devices": sorted({str(v.device) for v in state.values()}),
    "checksum": sum(float(v.double().sum()) for v in state.values()),
}))
"""
RESUME = """import os, json
device = gc_device()
start = os.environ["DISTTRAIN_RESUME_FROM"]
state = torch.load(start, map_location=device)
model = GcNet(16).to(device)
model.load_state_dict(state["model"])
print("GC", json.dumps({
    "resumed_from": start,
    "step": state["step"],
    "device": str(next(model.parameters()).device),
    "checksum": sum(float(v.double().sum()) for v in model.state_dict().values()),
}))
"""
LOADED = """print("GC", json.dumps({
    "cuda": torch.cuda.is_available(),
    "devices": sorted({str(p.device) for p in model.parameters()}),
    "checksum": sum(float(v.double().sum()) for v in model.state_dict().values()),
}))
"""


@check(
    "throughput",
    f"a bf16 training loop through %%distrun against raw torchrun, interleaved pairs (target >= {TARGET})",
)
def throughput(s: Session, c: Check) -> None:
    sizes = c.figure("sizes", GPU_TRAIN if s.gpu else CPU_TRAIN)
    s.cell(f"GC_TRAIN = {sizes!r}")
    pairs = 3 if s.gpu else 1
    ratios, distrun_sps, raw_sps = [], [], []
    script_job = None
    for i in range(pairs):
        # ABBA: %%distrun first in even pairs (the first makes the script), raw torchrun first in odd.
        order = ("distrun", "torchrun") if i % 2 == 0 else ("torchrun", "distrun")
        got: dict[str, float] = {}
        for kind in order:
            if kind == "distrun":
                launched = s.distrun("--gpus 1", TRAIN, "gc-train")
                if not s.succeeded(c, launched, f"pair {i + 1}'s %%distrun run") or launched.job_id is None:
                    return
                script_job = launched.job_id
                mark = s.mark(c, launched.job_id, "steps_per_s")
                if not mark:
                    return
            else:
                assert script_job is not None
                out, _ = s.torchrun(script_job, nproc=1)
                mark = stdout_marks(out)[0]
            got[kind] = mark["steps_per_s"]
        distrun_sps.append(round(got["distrun"], 3))
        raw_sps.append(round(got["torchrun"], 3))
        ratios.append(got["distrun"] / got["torchrun"])
    c.figure("distrun_steps_per_s", distrun_sps)
    c.figure("torchrun_steps_per_s", raw_sps)
    c.figure("device", mark["device"])
    ratio = c.figure("ratio_distrun_to_torchrun", round(statistics.median(ratios), 4))
    c.expect("the loop trains in bf16", mark["dtype"] == "torch.bfloat16", mark["dtype"])
    c.expect("the loop trains on the GPU", mark["device"].startswith("cuda"), mark["device"], gpu=True)
    c.expect(
        f"%%distrun's throughput is at least {TARGET} of raw torchrun's", ratio >= TARGET, ratio, gpu=True
    )


@check(
    "checkpoints",
    "a CUDA-tensor checkpoint: listed, resumed with --resume JOB:latest, loaded on CPU without a GPU",
)
def checkpoints(s: Session, c: Check) -> None:
    defined = s.cell(NET)
    c.expect("the notebook defines the model class", defined.error is None, defined.error or "")
    saved = s.distrun("--gpus 1", SAVE, "gc-ckpt")
    if not s.succeeded(c, saved, "the saving job") or saved.job_id is None:
        return
    mark = s.mark(c, saved.job_id, "saved_step")
    if not mark:
        return
    c.expect("the checkpoint holds CUDA tensors", mark["devices"] == ["cuda:0"], mark["devices"], gpu=True)
    listing = s.job(saved.job_id).checkpoints()
    listed = [(cp.step, cp.kind, cp.complete) for cp in listing.checkpoints]
    c.figure("listed", listed)
    c.expect("the job lists its checkpoint: step 3, torch, complete", listed == [(3, "torch", True)], listed)
    if listed != [(3, "torch", True)]:
        return
    checkpoint = listing.checkpoints[0]
    resumed = s.distrun(f"--gpus 1 --resume {saved.job_id}:latest", RESUME, "gc-resume")
    if not s.succeeded(c, resumed, "the resumed job") or resumed.job_id is None:
        return
    spec = s.record(resumed.job_id).spec
    got = s.mark(c, resumed.job_id, "resumed_from")
    c.expect(
        "the resumed job records what it resumed from",
        spec.resumed_from is not None
        and spec.resumed_from.step == 3
        and spec.resumed_from.path == checkpoint.path,
        spec.resumed_from.path if spec.resumed_from else None,
    )
    if got:
        c.expect(
            "the rank got the checkpoint's path and step",
            (got["resumed_from"], got["step"]) == (checkpoint.path, 3),
            got,
        )
        c.expect("the rank loaded it onto its GPU", got["device"] == "cuda:0", got["device"], gpu=True)
        c.expect(
            "the resumed weights are the saved ones",
            abs(got["checksum"] - mark["checksum"]) < 1e-9,
            got["checksum"],
        )
    cell = s.job(saved.job_id).manager.job_checkpoints.load_code(saved.job_id, checkpoint.id)
    c.figure("load_cell_model_class", cell.model_class)
    loaded = _load_without_gpu(s, cell.code)
    c.figure("loaded_without_gpu", loaded)
    c.expect("the load cell ran in a kernel without a GPU", "error" not in loaded, loaded.get("error", ""))
    if "error" in loaded:
        return
    c.expect('that kernel has no GPU (CUDA_VISIBLE_DEVICES="")', loaded["cuda"] is False, loaded["cuda"])
    c.expect("the weights loaded onto the CPU", loaded["devices"] == ["cpu"], loaded["devices"])
    c.expect(
        "the loaded weights are the saved ones",
        abs(loaded["checksum"] - mark["checksum"]) < 1e-9,
        loaded["checksum"],
    )


def _load_without_gpu(s: Session, load_cell: str) -> dict[str, object]:
    """Run the checkpoint's load cell in a second kernel started with ``CUDA_VISIBLE_DEVICES=""``
    (a notebook on a machine without a GPU), after the cell that defines the model class."""
    kernel = Kernel(s.work, {**os.environ, "CUDA_VISIBLE_DEVICES": ""}, s.kernels)
    try:
        for code in ("import json, torch", NET, load_cell, LOADED):
            ran = kernel.run(code, s.cell_timeout)
            if ran.error:
                return {"error": ran.error[-2000:], "cell": code}
        lines = [ln for ln in ran.text.splitlines() if ln.startswith("GC ")]
        return dict(json.loads(lines[-1][3:]))
    finally:
        kernel.close()
