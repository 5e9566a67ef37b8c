"""Checks before launch on everything that goes into the script: pitfalls in code taken from earlier
cells (named by their cell and JupyterLab line), names defined nowhere, GPU code on a job without GPUs."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain.model.errors import PackagingError
from jupyter_disttrain.packaging import PackagedScript, package_cell
from jupyter_disttrain.packaging.checks import surely_read
from jupyter_disttrain.packaging.pitfalls import Block, Target, check_blocks

CPU_JOB = Target(world_size=2, flags="--gpus 2 --nodes 1", no_gpu="--accelerator cpu")


def run(ip: InteractiveShell, source: str) -> None:
    result = ip.run_cell(textwrap.dedent(source), store_history=True)
    assert result.success, result.error_in_exec or result.error_before_exec


def package(ip: InteractiveShell, cell: str, **options: Any) -> PackagedScript:
    # As the magic calls it: the cell's first line is JupyterLab's line 2.
    return package_cell(
        textwrap.dedent(cell).lstrip("\n"), list(ip.user_ns["In"][1:]), ip.user_ns, cell_line=2, **options
    )


TRAIN_CELL = """\
import torch

def train(model, epochs):
    for epoch in range(epochs):
        pass
    torch.save(model.state_dict(), "ckpt.pt")
"""


def test_a_ddp_state_dict_saved_in_an_earlier_cells_function_is_warned_with_that_cells_line(
    shell: InteractiveShell,
) -> None:
    run(shell, "x = 1")
    run(shell, TRAIN_CELL)  # In [2]: line 6 in JupyterLab
    cell = """
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(torch.nn.Linear(1, 1))
    train(model, 1)
    """
    found = [(p.code, p.cell, p.line) for p in package(shell, cell).pitfalls]
    assert ("ddp-state-dict", "In [2]", 6) in found
    assert ("unguarded-save", "In [2]", 6) in found
    assert next(p for p in package(shell, cell).pitfalls if p.cell).where == "In [2] line 6"


def test_the_cells_own_lines_are_jupyterlabs(shell: InteractiveShell) -> None:
    # The %%distrun line is line 1 in JupyterLab; the cell's first code line is 2.
    found = package(shell, "import torch\nm = torch.nn.DataParallel(torch.nn.Linear(1, 1))\n").pitfalls
    assert [(p.code, p.cell, p.line, p.where) for p in found] == [("data-parallel", "", 3, "line 3")]


def test_a_function_of_an_earlier_cell_called_under_a_rank_test_is_guarded(shell: InteractiveShell) -> None:
    run(shell, "import torch\ndef save(model):\n    torch.save(model.state_dict(), 'a.pt')\n")
    quiet = package(
        shell, "import torch.distributed as dist\nnet = 1\nif dist.get_rank() == 0:\n    save(net)\n"
    )
    assert quiet.pitfalls == []
    with pytest.raises(PackagingError, match="`net`"):
        package(shell, "save(net)\n")
    loud = package(shell, "net = torch.nn.Linear(1, 1)\nsave(net)\n")
    assert [(p.code, p.cell, p.line) for p in loud.pitfalls] == [("unguarded-save", "In [1]", 3)]


def test_a_silencing_comment_in_an_earlier_cell_works_there(shell: InteractiveShell) -> None:
    run(shell, "import torch\ndef save(m):\n    torch.save(m, 'a.pt')  # distrun: ignore[unguarded-save]\n")
    assert package(shell, "save(1)\n").pitfalls == []


def test_a_ddp_model_read_as_a_global_by_an_earlier_function() -> None:
    blocks = [
        Block("def save():\n    torch.save(model.state_dict(), 'a.pt')", "In [4]", 1),
        Block("def other(model):\n    return model.state_dict()", "In [5]", 3),
        Block("model = DDP(net)\nif rank == 0:\n    save()\nother(net)", "", 2),
    ]
    found = [(p.code, p.cell, p.line) for p in check_blocks(blocks)]
    # `other` gets a plain model as its own parameter: no warning there.
    assert found == [("ddp-state-dict", "In [4]", 2)]


# --- undefined names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cell", "line"),
    [
        ("print(nowhere)", 1),
        ("x = 1\nfor i in range(3):\n    total += nowhere(i)", 3),
        ("def main():\n    return nowhere\n\nmain()", 2),
        ("class A(nowhere):\n    pass", 1),
        ("def f(x=nowhere):\n    pass", 1),
    ],
)
def test_a_name_read_while_the_cell_runs_is_surely_undefined(cell: str, line: int) -> None:
    assert surely_read(cell, {"nowhere"}) == {"nowhere": line}


@pytest.mark.parametrize(
    "cell",
    [
        "def later():\n    return nowhere",  # never called
        "from os.path import *\nprint(nowhere)",  # a star import may bind it
        "exec('nowhere = 1')\nprint(nowhere)",
        "globals()['nowhere'] = 1\nprint(nowhere)",
        "try:\n    nowhere\nexcept NameError:\n    pass",
        "try:\n    print(nowhere)\nexcept Exception:\n    pass",
        "callbacks = [lambda: nowhere]",
        "squares = [nowhere(i) for i in range(3)]",
        "import builtins\nprint(nowhere)",
        "import sys\nsys.modules[__name__].__dict__['nowhere'] = 1\nprint(nowhere)",
        "__builtins__.nowhere = 1\nprint(nowhere)",
        "class A:\n    x = nowhere",
    ],
)
def test_names_that_may_be_bound_at_run_time_are_not_refused(cell: str) -> None:
    assert surely_read(cell, {"nowhere"}) == {}


def test_global_in_a_function_and_file_are_not_undefined(shell: InteractiveShell) -> None:
    cell = "def setup():\n    global cfg\n    cfg = 1\n\nsetup()\nprint(cfg, __file__)\n"
    assert package(shell, cell).pitfalls == []


def test_the_refusal_names_the_name_the_jupyterlab_line_and_the_ways_out(shell: InteractiveShell) -> None:
    with pytest.raises(PackagingError) as error:
        package(shell, "import torch\nmodel = Nett()\n")
    message = str(error.value)
    assert "line 3 of the cell uses `Nett`" in message and "NameError" in message
    assert "# distrun: ignore[undefined-name]" in message and "--no-check undefined-name" in message
    assert package(shell, "import torch\nmodel = Nett()  # distrun: ignore[undefined-name]\n").pitfalls == []
    assert package(shell, "import torch\nmodel = Nett()\n", ignore={"undefined-name"}).pitfalls == []


# --- GPU code on a job without GPUs ----------------------------------------------------------------


def test_gpu_calls_on_a_job_without_gpus(shell: InteractiveShell) -> None:
    cell = """
    import os, torch
    import torch.distributed as dist
    dist.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = torch.nn.Linear(1, 1).cuda()
    x = torch.zeros(1).to("cuda:0")
    """
    found = [(p.code, p.line) for p in package(shell, cell, target=CPU_JOB).pitfalls]
    assert found == [("cuda-without-gpu", n) for n in (4, 6, 7, 8)]
    assert package(shell, cell).pitfalls == []  # no target: nothing known about GPUs


def test_gpu_calls_guarded_by_availability_are_quiet(shell: InteractiveShell) -> None:
    cell = """
    import os, torch
    import torch.distributed as dist
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    def to_gpu(model):
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        return model.cuda()
    model = torch.nn.Linear(1, 1)
    if use_cuda:
        model = to_gpu(model)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    def gpu_only():
        if not torch.cuda.is_available():
            return None
        return torch.zeros(1).cuda()
    def asserted():
        assert torch.cuda.device_count() > 0, "needs a GPU"
        return torch.zeros(1).to("cuda")
    gpu_only()
    asserted()
    """
    assert package(shell, cell, target=CPU_JOB).pitfalls == []


def test_a_literal_world_size_that_disagrees_with_the_flags(shell: InteractiveShell) -> None:
    cell = """
    import torch.distributed as dist
    n_gpus = 4
    dist.init_process_group("gloo", world_size=n_gpus, rank=int(os.environ["RANK"]))
    """
    target = Target(world_size=2, flags="--gpus 2 --nodes 1")
    found = package(shell, "import os\n" + textwrap.dedent(cell).lstrip("\n"), target=target).pitfalls
    assert [(p.code, p.line) for p in found] == [("world-size-mismatch", 5)]
    assert "4 processes" in found[0].message and "runs 2 (--gpus 2 --nodes 1)" in found[0].message
    same = Target(world_size=4, flags="--gpus 2 --nodes 2")
    assert package(shell, "import os\n" + textwrap.dedent(cell).lstrip("\n"), target=same).pitfalls == []


def test_lines_are_counted_as_the_parser_counts_them() -> None:
    # str.splitlines() would split at the form feed and shift every later line.
    blocks = [
        Block('s = "a\x0cb"\ndef f(m):\n    torch.save(m, "a")', "In [2]", 1),
        Block("f(1)\nimport torch.nn as nn\nnn.DataParallel(x)", "", 2),
    ]
    assert [(p.code, p.cell, p.line) for p in check_blocks(blocks)] == [
        ("unguarded-save", "In [2]", 3),
        ("data-parallel", "", 4),
    ]
