"""The notebook stays the front end (issue 37), in one real kernel with real 2-rank gloo jobs:
``--out`` values back in the kernel, the rank's own exception raised in the cell, and a rank's
pdb prompt answered through the kernel's stdin (the text view; the widget's input is the browser
test's, tests/ui/tests/debugger.spec.ts). The kernel's first jobs run warm (ranks forked from
the zygote ``%load_ext`` starts), the post-mortem one cold."""

from __future__ import annotations

import json
import os
import queue
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client import KernelManager

from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage import procs
from jupyter_disttrain.storage.store import JobStore

_ANSI = re.compile(r"\x1b\[[0-9;]*m")

MODEL_CELL = """\
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(4, width)

    def forward(self, x):
        return self.fc(x)
"""

DDP_CELL = """\
%%distrun --gpus 2 --name back --out model,losses,big --out-all rank --out-limit 256KiB
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(Net(3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
losses = []
for step in range(3):
    loss = model(torch.randn(8, 4) + rank).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
big = torch.zeros(1024 * 1024)  # 4 MiB: past --out-limit
if rank == 0:
    torch.save(model.module.state_dict(), "rank0-final.pt")
dist.destroy_process_group()
"""

FSDP_CELL = """\
%%distrun --gpus 2 --name fsdp --out sharded
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
dist.init_process_group("gloo")
torch.manual_seed(1)
sharded = nn.Sequential(Net(8), nn.Linear(8, 2))
for layer in sharded:
    fully_shard(layer)
fully_shard(sharded)
sharded(torch.ones(2, 4)).sum().backward()
"""

FAILING_CELL = """\
from jupyter_disttrain.notebook.magics import JobFailedError
body = '''
import torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise ZeroDivisionError("rank one divided by zero")
dist.barrier()
'''
try:
    try:
        get_ipython().run_cell_magic("distrun", "--gpus 2 --name zero", body)
    except ZeroDivisionError as err:
        caught = err
        raise
except JobFailedError as again:
    print(json.dumps({"same": again is caught, "type": type(caught).__name__, "message": str(caught),
                      "job": isinstance(caught, JobFailedError)}))
"""

BREAKPOINT_CELL = """\
%%distrun --gpus 2 --name pdb
import torch, torch.distributed as dist
from torch.distributed import distributed_c10d as c10d
dist.init_process_group("gloo")
print("group timeout", c10d.default_pg_timeout, flush=True)
x = 41 + dist.get_rank()
for round in range(2):
    if dist.get_rank() == 1:
        breakpoint()
        y = x + 1
    dist.all_reduce(torch.ones(1))
"""

POST_MORTEM_CELL = """\
%%distrun --gpus 2 --name postmortem --pdb
import torch.distributed as dist
dist.init_process_group("gloo")
def train(cfg):
    lr = cfg["lr"]
    return lr
if dist.get_rank() == 1:
    train({"epochs": 3})
dist.barrier()
"""


class Kernel:
    """A real kernel that answers ``input()`` from a list (its stdin channel)."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=str(cwd), env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)

    def run(
        self, code: str, answers: tuple[str, ...] = (), timeout: float = 240
    ) -> tuple[str, dict[str, Any], list[float]]:
        """Run ``code``; its output, its reply, and when each answer was sent (monotonic)."""
        msg_id = self.kc.execute(code, allow_stdin=True)
        pending, sent, out = list(answers), [], []
        reply: dict[str, Any] | None = None
        idle = False
        deadline = time.monotonic() + timeout
        while reply is None or not idle:  # iopub runs apart from shell: its output up to idle
            assert time.monotonic() < deadline, "".join(out)
            try:
                request = self.kc.get_stdin_msg(timeout=0.02)
                assert pending, f"unexpected input request {request['content']}; output: {''.join(out)}"
                self.kc.input(pending.pop(0))
                sent.append(time.monotonic())
            except queue.Empty:
                pass
            try:
                while True:
                    msg = self.kc.get_iopub_msg(timeout=0.02)
                    if msg["parent_header"].get("msg_id") != msg_id:
                        continue
                    kind, content = msg["msg_type"], msg["content"]
                    if kind == "stream":
                        out.append(content["text"])
                    elif kind == "error":
                        out.append(_ANSI.sub("", "\n".join(content["traceback"])) + "\n")
                    idle = idle or (kind == "status" and content["execution_state"] == "idle")
            except queue.Empty:
                pass
            try:
                msg = self.kc.get_shell_msg(timeout=0.02)
                if msg["parent_header"].get("msg_id") == msg_id:
                    reply = msg["content"]
            except queue.Empty:
                pass
        assert not pending, f"answers left: {pending}; output: {''.join(out)}"
        return "".join(out), reply, sent

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Kernel, Path]]:
    cwd = tmp_path_factory.mktemp("notebook")
    root = cwd / "jobs"
    env = {**os.environ, "DISTTRAIN_JOB_ROOT": str(root), "DISTTRAIN_VIEW": "text"}
    k = Kernel(cwd, env)
    try:
        k.run("%load_ext jupyter_disttrain\nimport json, os")
        yield k, root
    finally:
        k.close()


def _job(root: Path, name: str) -> str:
    (record,) = [r for r in JobStore(root).records() if r.spec.name == name]
    return record.id


def test_out_brings_the_model_and_values_back_and_load_does_again(kernel: tuple[Kernel, Path]) -> None:
    k, root = kernel
    k.run(MODEL_CELL)
    said, reply, _ = k.run(DDP_CELL)
    assert reply["status"] == "ok", said
    assert "back in the kernel: model (Net), losses (list of 3 float), rank (list of 2 int)" in said
    assert "big did not come back: 4.0 MiB is over --out-limit (256.0 KiB per rank, " in said
    check = """
final = torch.load("rank0-final.pt")
print(json.dumps({
    "type": type(model).__name__, "is_net": isinstance(model, Net),
    "equal": sorted(final) == sorted(model.state_dict())
    and all(torch.equal(final[k], v) for k, v in model.state_dict().items()),
    "losses": [type(v).__name__ for v in losses], "n": len(losses), "rank": rank, "big": "big" in dir(),
}))
"""
    got = json.loads(k.run(check)[0].strip().splitlines()[-1])
    assert got == {
        "type": "Net",
        "is_net": True,
        "equal": True,
        "losses": ["float"] * 3,
        "n": 3,
        "rank": [0, 1],
        "big": False,
    }
    job_id = _job(root, "back")
    status = k.run(f"%distrun status {job_id}")[0]
    assert re.search(r"model\s+rank 0  module Net, \d+(\.\d)?[KB]", status), status
    assert "big     rank 0  not kept: 4.0 MiB is over" in status, status
    assert "rank    rank 1  value int" in status, status
    # After a restart (here: the names gone), %distrun load brings the same objects in again.
    again = k.run(
        f"saved = model.state_dict()\ndel model, losses\n%distrun load {job_id}\n"
        "print(all(torch.equal(saved[k], v) for k, v in model.state_dict().items()), len(losses))"
    )[0]
    assert again.strip().splitlines()[-1] == "True 3", again


def test_an_fsdp_module_is_gathered_and_comes_back_as_its_own_class(kernel: tuple[Kernel, Path]) -> None:
    k, _ = kernel
    said, reply, _ = k.run(FSDP_CELL)
    assert reply["status"] == "ok" and "back in the kernel: sharded (Sequential)" in said, said
    check = (
        "torch.manual_seed(1)\nref = nn.Sequential(Net(8), nn.Linear(8, 2))\n"
        "print(type(sharded[0]).__name__, all(torch.equal(a, b) for a, b in "
        "zip(ref.state_dict().values(), sharded.state_dict().values())), sorted(sharded.state_dict()))"
    )
    assert k.run(check)[0].strip() == "Net True ['0.fc.bias', '0.fc.weight', '1.bias', '1.weight']"


def test_the_ranks_zero_division_error_is_raised_in_the_cell(kernel: tuple[Kernel, Path]) -> None:
    k, _ = kernel
    said = k.run(FAILING_CELL)[0]
    got = json.loads(said.strip().splitlines()[-1])
    assert got == {
        "same": True,
        "type": "ZeroDivisionError",
        "message": "rank one divided by zero",
        "job": True,
    }


def test_breakpoint_on_rank_1_is_answered_from_the_cell_and_q_cancels_the_job(
    kernel: tuple[Kernel, Path],
) -> None:
    k, root = kernel
    said, reply, sent = k.run(BREAKPOINT_CELL, ("p x", "n", "p y", "c", "p round", "q"))
    ended = time.monotonic()
    job_id = _job(root, "pdb")
    assert reply["status"] == "error" and reply["ename"] == "JobCancelledError", said
    assert ended - sent[-1] <= 5.0, f"q took {ended - sent[-1]:.1f} s to end the job"
    # Where it stopped, as the notebook numbers the cell's lines (the %%distrun line is line 1).
    assert re.search(r"rank-1 waits in the debugger at In \[\d+\], line 10; the other ranks wait", said), said
    assert re.search(r"> In \[\d+\], line 10 <module>\(\)\n-> y = x \+ 1", said), said
    assert "\n42\n" in said and "\n43\n" in said and "\n1\n" in said  # x, y; the second round
    assert f"job {job_id} cancelled from rank-1's debugger" in said
    assert "group timeout 1 day, 0:00:00" in (root / job_id / "logs" / "rank-0.log").read_text()
    status = JobStore(root).read_status(job_id)
    assert status is not None and status.phase is JobPhase.CANCELLED
    assert "(warm:" in next(e.message for e in status.events if e.reason == "Started")
    assert procs.job_processes(job_id) == []
    transcript = (root / job_id / "debug" / "rank-1.txt").read_text()
    assert "(Pdb) p x\n42\n(Pdb) n\n" in transcript and transcript.rstrip().endswith(
        "(the job is being cancelled)"
    )


def test_pdb_opens_a_post_mortem_on_the_failing_rank_with_its_locals(kernel: tuple[Kernel, Path]) -> None:
    k, root = kernel
    k.run("os.environ['DISTTRAIN_WARM'] = '0'  # this one cold")
    said, reply, _ = k.run(POST_MORTEM_CELL, ("p cfg", "p locals()", "c"))
    assert "post-mortem: KeyError: 'lr'" in said and "{'epochs': 3}" in said, said
    assert "{'cfg': {'epochs': 3}}" in said
    assert reply["status"] == "error" and reply["ename"] == "KeyError" and reply["evalue"] == "'lr'", said
    status = JobStore(root).read_status(_job(root, "postmortem"))
    assert status is not None and status.phase is JobPhase.FAILED
    assert "(warm:" not in next(e.message for e in status.events if e.reason == "Started")
