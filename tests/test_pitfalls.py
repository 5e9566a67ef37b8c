"""DDP pitfall checks: each fires on the bad form (at the right cell line), stays quiet on the
correct form, and can be silenced by code or by a trailing comment."""

from __future__ import annotations

import textwrap
from collections.abc import Collection

import pytest

from jupyter_disttrain.packaging import Pitfall
from jupyter_disttrain.packaging.pitfalls import CODES, Target
from jupyter_disttrain.packaging.pitfalls import check_pitfalls as check_cell

# A 2-process job with GPUs; the GPU checks get a job without one.
GPU_JOB = Target(world_size=2, flags="--gpus 2 --nodes 1", nproc_per_node=2, nodes=1)
CPU_JOB = Target(world_size=2, flags="--gpus 2 --nodes 1", no_gpu="--accelerator cpu")
TARGETS = {"cuda-without-gpu": CPU_JOB}


def check_pitfalls(source: str, ignore: Collection[str] = (), code: str = "") -> list[Pitfall]:
    return check_cell(source, ignore, target=TARGETS.get(code, GPU_JOB))


def cell(source: str) -> str:
    return textwrap.dedent(source).lstrip("\n")


# (code, bad cell, line of the warning, a correct version of the same cell)
CASES = [
    (
        "lightning-devices",
        """
        import lightning as L
        trainer = L.Trainer(accelerator="cpu", devices=4, strategy="ddp")
        """,
        2,
        """
        import lightning as L
        trainer = L.Trainer(accelerator="cpu", devices=2, num_nodes=1, strategy="ddp")
        """,
    ),
    (
        "lightning-spawn",
        """
        from pytorch_lightning import Trainer
        trainer = Trainer(devices=2, strategy="ddp_notebook")
        """,
        2,
        """
        from pytorch_lightning import Trainer
        trainer = Trainer(devices=2, strategy="ddp")
        """,
    ),
    (
        "sampler-set-epoch",
        """
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, sampler=sampler)
        for epoch in range(3):
            for batch in loader:
                step(batch)
        """,
        3,
        """
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, sampler=sampler)
        for epoch in range(3):
            sampler.set_epoch(epoch)
            for batch in loader:
                step(batch)
        """,
    ),
    (
        "unguarded-save",
        """
        import torch
        train()
        torch.save(model.state_dict(), "ckpt.pt")
        """,
        3,
        """
        import torch
        train()
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "ckpt.pt")
        """,
    ),
    (
        "ddp-state-dict",
        """
        model = DDP(Net().to(device), device_ids=[local_rank])
        train(model)
        if rank == 0:
            torch.save({"model": model.state_dict()}, "ckpt.pt")
        """,
        4,
        """
        model = DDP(Net().to(device), device_ids=[local_rank])
        train(model)
        if rank == 0:
            torch.save({"model": model.module.state_dict()}, "ckpt.pt")
        """,
    ),
    (
        "data-parallel",
        """
        import torch.nn as nn
        model = nn.DataParallel(Net())
        """,
        2,
        """
        import torch.nn as nn
        model = nn.parallel.DistributedDataParallel(Net())
        """,
    ),
    (
        "hardcoded-rank",
        """
        import torch.distributed as dist
        dist.init_process_group("gloo", world_size=2, rank=0)
        """,
        2,
        """
        import os
        import torch.distributed as dist
        dist.init_process_group("gloo", world_size=int(os.environ["WORLD_SIZE"]))
        """,
    ),
    (
        "cuda-without-device",
        """
        model = Net()
        model.cuda()
        """,
        2,
        """
        import os, torch
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        model = Net()
        model.cuda()
        """,
    ),
    (
        "cuda-without-gpu",
        """
        import os, torch
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        """,
        2,
        """
        import os, torch
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        """,
    ),
    (
        "world-size-mismatch",
        """
        import torch.multiprocessing as mp
        mp.spawn(train, args=(4,), nprocs=4)
        """,
        2,
        """
        import torch.multiprocessing as mp
        mp.spawn(train, args=(2,), nprocs=2)
        """,
    ),
    (
        "unguarded-writer",
        """
        from torch.utils.tensorboard import SummaryWriter
        writer = SummaryWriter("runs/mnist")
        """,
        2,
        """
        from torch.utils.tensorboard import SummaryWriter
        if dist.get_rank() == 0:
            writer = SummaryWriter("runs/mnist")
        """,
    ),
    (
        "guarded-collective-save",
        """
        import deepspeed
        engine, optimizer, _, _ = deepspeed.initialize(model=net, config=cfg)
        if rank == 0:
            engine.save_checkpoint("ckpts")
        """,
        4,
        """
        import deepspeed
        engine, optimizer, _, _ = deepspeed.initialize(model=net, config=cfg)
        engine.save_checkpoint("ckpts")
        """,
    ),
]


@pytest.mark.parametrize(("code", "bad", "line", "good"), CASES, ids=[c[0] for c in CASES])
def test_fires_on_the_bad_form_at_the_cell_line(code: str, bad: str, line: int, good: str) -> None:
    found = check_pitfalls(cell(bad), code=code)
    assert [(p.code, p.line) for p in found] == [(code, line)]
    assert "\n" not in found[0].message and len(found[0].message) > 30


@pytest.mark.parametrize(("code", "bad", "line", "good"), CASES, ids=[c[0] for c in CASES])
def test_quiet_on_the_correct_form(code: str, bad: str, line: int, good: str) -> None:
    assert check_pitfalls(cell(good), code=code) == []


@pytest.mark.parametrize(("code", "bad", "line", "good"), CASES, ids=[c[0] for c in CASES])
def test_silenced_by_code_or_by_comment(code: str, bad: str, line: int, good: str) -> None:
    source = cell(bad)
    assert check_pitfalls(source, ignore={code}, code=code) == []
    lines = source.splitlines()
    lines[line - 1] += f"  # distrun: ignore[other-code, {code}]"
    assert check_pitfalls("\n".join(lines), code=code) == []
    lines[line - 1] = lines[line - 1].replace(code, "not-this-one")
    assert [p.code for p in check_pitfalls("\n".join(lines), code=code)] == [code]


def test_every_code_is_covered() -> None:
    assert sorted(c[0] for c in CASES) == sorted(CODES)


def test_messages_say_what_to_write_instead() -> None:
    messages = {c[0]: check_pitfalls(cell(c[1]), code=c[0])[0].message for c in CASES}
    assert "set_epoch(epoch)" in messages["sampler-set-epoch"]
    assert "get_rank() == 0" in messages["unguarded-save"]
    assert "model.module.state_dict()" in messages["ddp-state-dict"]
    assert "DistributedDataParallel" in messages["data-parallel"]
    assert "os.environ" in messages["hardcoded-rank"]
    assert "set_device" in messages["cuda-without-device"]
    assert (
        "is_available()" in messages["cuda-without-gpu"]
        and "--accelerator cpu" in messages["cuda-without-gpu"]
    )
    assert "WORLD_SIZE" in messages["world-size-mismatch"] and "--gpus 2" in messages["world-size-mismatch"]
    assert "pass devices=2 or change --gpus" in messages["lightning-devices"]
    assert "use strategy='ddp'" in messages["lightning-spawn"]


def test_lightning_num_nodes_is_checked_against_nodes() -> None:
    source = "import lightning as L\nt = L.Trainer(devices=[0, 1], num_nodes=2)\n"
    (found,) = check_pitfalls(source)
    assert found.code == "lightning-devices" and "--nodes 1" in found.message


# --- the variants each check must get right --------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        # set_epoch in a helper the loop calls
        """
        sampler = DistributedSampler(ds)
        def run_epoch(epoch):
            sampler.set_epoch(epoch)
            for batch in loader:
                step(batch)
        for epoch in range(3):
            run_epoch(epoch)
        """,
        # no shuffling, so no epoch needed
        """
        sampler = DistributedSampler(ds, shuffle=False)
        for epoch in range(3):
            for batch in loader:
                step(batch)
        """,
        # a sampler but a single pass
        """
        sampler = DistributedSampler(ds)
        for batch in loader:
            step(batch)
        """,
    ],
)
def test_sampler_set_epoch_quiet_variants(source: str) -> None:
    assert check_pitfalls(cell(source)) == []


def test_sampler_set_epoch_called_once_outside_the_loop_still_fires() -> None:
    source = """
    sampler = DistributedSampler(ds)
    sampler.set_epoch(0)
    for epoch in range(3):
        for batch in loader:
            step(batch)
    """
    assert [(p.code, p.line) for p in check_pitfalls(cell(source))] == [("sampler-set-epoch", 3)]


@pytest.mark.parametrize(
    "source",
    [
        "if int(os.environ['LOCAL_RANK']) == 0:\n    torch.save(sd, 'a.pt')",
        "if is_main_process():\n    model.save_pretrained('out')",
        "if trainer.is_global_zero:\n    save_checkpoint(state)",
        "rank == 0 and torch.save(sd, 'a.pt')",
        "def save(state):\n    if dist.get_rank() != 0:\n        return\n    torch.save(state, 'a.pt')",
        "def save(state):\n    torch.save(state, 'a.pt')\nif rank == 0:\n    save(sd)\nelse:\n    pass",
        "@rank_zero_only\ndef save(state):\n    torch.save(state, 'a.pt')",
        "model.save_pretrained('out', is_main_process=dist.get_rank() == 0)",
        "trainer.save_checkpoint('last.ckpt')",
        "for step in range(10):\n    if step % 5 or rank:\n        continue\n    torch.save(sd, 'a.pt')",
    ],
)
def test_unguarded_save_quiet_variants(source: str) -> None:
    assert check_pitfalls(source) == []


@pytest.mark.parametrize(
    ("source", "line"),
    [
        ("model.save_pretrained('out')", 1),
        ("save_checkpoint(state, 'a.pt')", 1),
        ("def save(state):\n    torch.save(state, 'a.pt')\nsave(sd)\nif rank == 0:\n    save(sd)", 2),
        ("if __name__ == '__main__':\n    torch.save(sd, 'a.pt')", 2),
    ],
)
def test_unguarded_save_fires_variants(source: str, line: int) -> None:
    assert [(p.code, p.line) for p in check_pitfalls(source)] == [("unguarded-save", line)]


@pytest.mark.parametrize(
    "source",
    [
        'writer = SummaryWriter(f"runs/rank{rank}")',  # a directory per rank
        "writer = SummaryWriter(log_dir=os.path.join(tb, str(dist.get_rank())))",
        "if is_main_process():\n    writer = SummaryWriter()",
        "def make():\n    return SummaryWriter()\nif rank == 0:\n    w = make()",
        "from jupyter_disttrain import em\nrun = em.create_run('mnist')",  # em is rank-aware
    ],
)
def test_unguarded_writer_quiet_variants(source: str) -> None:
    assert check_pitfalls(source) == []


def test_a_deepspeed_engine_saves_on_every_rank_and_others_still_on_one() -> None:
    engine = "model_engine, opt, _, _ = deepspeed.initialize(model=m)\n"
    # Unguarded: right for DeepSpeed (no unguarded-save); guarded by an early return: wrong.
    assert check_pitfalls(engine + "model_engine.save_checkpoint('d')") == []
    early = (
        engine
        + "def save():\n    if rank != 0:\n        return\n    model_engine.save_checkpoint('d')\nsave()"
    )
    assert [p.code for p in check_pitfalls(early)] == ["guarded-collective-save"]
    # Without DeepSpeed, a save_checkpoint of one's own still belongs on rank 0.
    assert [p.code for p in check_pitfalls("engine.save_checkpoint('d')")] == ["unguarded-save"]


def test_ddp_state_dict_only_for_the_wrapped_name_after_wrapping() -> None:
    source = cell(
        """
        net = Net()
        sd0 = net.state_dict()
        ddp_net = DistributedDataParallel(net)
        sd1 = net.state_dict()
        sd2 = ddp_net.state_dict()
        """
    )
    assert [(p.code, p.line) for p in check_pitfalls(source)] == [("ddp-state-dict", 5)]


def test_hardcoded_rank_positional_and_rank_only() -> None:
    found = check_pitfalls("init_process_group('gloo', None, None, 4)")
    assert [(p.code, p.line) for p in found] == [("hardcoded-rank", 1), ("world-size-mismatch", 1)]
    assert [p.code for p in check_pitfalls("dist.init_process_group(backend='gloo', rank=1)")] == [
        "hardcoded-rank"
    ]
    assert check_pitfalls("dist.init_process_group(backend='gloo', rank=rank, world_size=ws)") == []


@pytest.mark.parametrize(
    ("source", "count"),
    [
        ("x = x.to('cuda')", 1),
        ("x = x.to(device='cuda')", 1),
        ("device = torch.device('cuda')", 1),
        ("x = x.cuda()\ny = y.to('cuda', non_blocking=True)", 2),
        ("x = x.cuda(local_rank)", 0),
        ("x = x.to(f'cuda:{local_rank}')", 0),
        ("device = torch.device('cuda', local_rank)", 0),
        ("x = x.to('cpu')", 0),
    ],
)
def test_cuda_without_device_variants(source: str, count: int) -> None:
    assert [p.code for p in check_pitfalls(source)] == ["cuda-without-device"] * count


def test_comment_silences_any_line_of_a_multiline_call() -> None:
    source = "model = nn.DataParallel(\n    Net(),  # distrun: ignore[data-parallel]\n)"
    assert check_pitfalls(source) == []


def test_hash_inside_a_string_does_not_silence() -> None:
    source = "model = nn.DataParallel(Net(), name='# distrun: ignore[data-parallel]')"
    assert [p.code for p in check_pitfalls(source)] == ["data-parallel"]


def test_a_cell_that_does_not_parse_gives_no_warnings() -> None:
    assert check_pitfalls("model = nn.DataParallel(") == []


def test_warnings_are_ordered_by_line() -> None:
    source = "a = x.cuda()\nb = nn.DataParallel(a)\ntorch.save(b, 'p')"
    assert check_pitfalls(source) == [
        Pitfall("cuda-without-device", 1, check_pitfalls("x.cuda()")[0].message),
        Pitfall("data-parallel", 2, check_pitfalls("nn.DataParallel(a)")[0].message),
        Pitfall("unguarded-save", 3, check_pitfalls("torch.save(b, 'p')")[0].message),
    ]


# A Trainer class in the style of the usual DDP tutorials: the epoch loop calls a method that calls
# set_epoch, saves through a method called only on local rank 0, and an optimizer set-up walks
# the modules with a nested loop (not an epoch loop).
TRAINER = """
import torch
from torch.utils.data import DataLoader, DistributedSampler

class Trainer:
    def __init__(self, model, data, local_rank):
        self.model = model
        self.local_rank = local_rank
        self.loader = DataLoader(data, sampler=DistributedSampler(data))

    def make_optimizer(self):
        decay = set()
        for module_name, module in self.model.named_modules():
            for param_name, param in module.named_parameters():
                decay.add(f"{module_name}.{param_name}")
        return torch.optim.AdamW(self.model.parameters())

    def _one_epoch(self, epoch):
        self.loader.sampler.set_epoch(epoch)
        for batch in self.loader:
            self.model(batch).sum().backward()

    def _snapshot(self, epoch):
        torch.save({"model": self.model.state_dict(), "epoch": epoch}, "snapshot.pt")

    def train(self, epochs):
        for epoch in range(epochs):
            self._one_epoch(epoch)
            if self.local_rank == 0 and epoch % 2 == 0:
                self._snapshot(epoch)
"""


def test_a_trainer_class_that_does_it_right_gets_no_warning() -> None:
    assert check_pitfalls(cell(TRAINER)) == []


def test_a_trainer_class_method_is_followed_one_level_both_ways() -> None:
    wrong = cell(TRAINER).replace("        self.loader.sampler.set_epoch(epoch)\n", "")
    wrong = wrong.replace("if self.local_rank == 0 and epoch % 2 == 0:", "if epoch % 2 == 0:")
    found = [(p.code, p.line) for p in check_pitfalls(wrong)]
    assert found == [("unguarded-save", 22), ("sampler-set-epoch", 25)], found  # torch.save; the loop
