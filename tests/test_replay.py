"""Objects made in earlier cells travel by the statements that made them (the history slice), trained
state by value, configuration statements in order; refusals for what must not run twice.

Real IPython shells (history and namespace as the magic sees them); the scripts really run.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import nbformat
import pytest
from IPython.core.interactiveshell import InteractiveShell
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from jupyter_disttrain import api
from jupyter_disttrain.model.errors import PackagingError
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore
from tests.test_packaging import package, run, run_script


def run_anyway(shell: InteractiveShell, *cells: str) -> None:
    """Run cells that may fail here (no GPU, a bad call): the history holds them all the same."""
    for cell in cells:
        shell.run_cell(cell, store_history=True)


def test_parser_built_in_earlier_cells_is_replayed_and_reads_script_args(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    run(
        shell,
        "import argparse",
        "parser = argparse.ArgumentParser(description='mnist')\n"
        "parser.add_argument('--epochs', type=int, default=14)\nprint(parser.prog)",
        "parser.add_argument('--lr', type=float, default=1.0)",
    )
    packaged = package(shell, "args = parser.parse_args()\nprint(args.epochs, args.lr)")
    assert (
        "    # In [2] line 1\n    parser = argparse.ArgumentParser(description='mnist')\n" in packaged.source
    )
    assert "    # In [3] line 1\n    parser.add_argument('--lr'" in packaged.source
    assert "print(parser.prog)" not in packaged.source
    assert run_script(packaged, tmp_path, sys.executable, "-c", _ARGV_RUNNER) == "1 1.0\n"
    explained = "\n".join(packaged.explanation)
    assert "parser: by source, replaying In [2] line 1, In [2] line 2, In [3] line 1" in explained
    assert "left out In [2] line 3: `print(parser.prog)`: reads `parser` only" in explained


# Runs the script with `--epochs 1` as its arguments (what `-- --epochs 1` gives the job).
_ARGV_RUNNER = (
    "import runpy, sys; p = sys.argv[1]; sys.argv = [p, '--epochs', '1']; "
    "runpy.run_path(p, run_name='__main__')"
)


def test_latest_binding_wins_and_self_referencing_rebinds_reach_back(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    run(
        shell,
        "import torch",
        "model = torch.nn.Linear(3, 3)",  # replaced below: never replayed
        "model = torch.nn.Sequential(torch.nn.Linear(2, 4))\nmodel.append(torch.nn.ReLU())",
        "model = model.to(torch.float64)\nmodel[0].weight.data.fill_(0.5)",
    )
    packaged = package(shell, "print(model[0].weight.dtype, float(model[0].weight.sum()), len(model))")
    assert "Linear(3, 3)" not in packaged.source
    assert run_script(packaged, tmp_path) == "torch.float64 4.0 2\n"


def test_objects_of_classes_not_in_any_cell_and_closures_are_rebuilt(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    run(
        shell,
        "from dataclasses import make_dataclass\nPoint = make_dataclass('Point', ['x'])\np = Point(1)",
        "def make(k):\n    return lambda: k\nv = make(7)",
    )
    packaged = package(shell, "print(p.x, v())")
    assert run_script(packaged, tmp_path) == "1 7\n"


def test_statements_replayed_together_appear_once(shell: InteractiveShell, tmp_path: Path) -> None:
    run(
        shell,
        "import torch, copy",
        "class Box:\n    def __init__(self, n):\n        self.items = list(range(n))",
        "a, b = Box(2), Box(3)\na.items.append(9)\nfirst, again = a.items[0], copy.copy(a)",
    )
    packaged = package(shell, "print(a.items, b.items)")
    assert packaged.source.count("a, b = Box(2), Box(3)") == 1
    assert run_script(packaged, tmp_path) == "[0, 1, 9] [0, 1, 2]\n"


def test_a_model_trained_in_the_kernel_starts_the_job_from_its_weights(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    run(
        shell,
        "import torch\ntorch.manual_seed(0)",
        "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.5)",
        "def train(steps):\n    for _ in range(steps):\n        opt.zero_grad()\n"
        "        model(torch.ones(1, 2)).sum().backward()\n        opt.step()",
        "train(3)",
    )
    kernel_bias = float(shell.user_ns["model"].bias.detach())
    packaged = package(shell, "print(round(float(model.bias), 6))\nopt.step()")
    assert "    model.load_state_dict(_CAPTURED_TENSORS['model.state_dict()'])" in packaged.source
    assert "train(3)" not in packaged.source
    assert run_script(packaged, tmp_path) == f"{round(kernel_bias, 6)}\n"
    explained = "\n".join(packaged.explanation)
    assert "trained state of model loaded from side file captured_values.pt" in explained
    assert (
        "left out In [4] line 1: `train(3)`: trains `model`: its trained state is loaded instead" in explained
    )


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        (
            [
                "class Tracker:\n    def __init__(self):\n        self.seen = 0\n"
                "    def update(self, x):\n        self.seen += 1",
                "import torch\nw = torch.zeros(1, requires_grad=True)\ntracker = Tracker()",
                "for _ in range(2):\n    (w * 2).sum().backward()\n    tracker.update(w)",
            ],
            "cannot rebuild `tracker` for the job: In [3] line 1 `for _ in range(2): (w * 2).sum().backward()"
            " tracker.updat...` runs a training step, which must not run again in every process; build"
            " `tracker` inside the %%distrun cell, or put `# distrun: replay` in In [3] to replay it anyway",
        ),
        (
            [
                "class Remote:\n    def __init__(self, root, download=False):\n        self.root = root",
                "tracker = Remote('data', download=True)",
            ],
            "cannot rebuild `tracker` for the job: In [2] line 1 `tracker = Remote('data', download=True)`"
            " builds it with a download",
        ),
        (
            [
                "class Log:\n    pass",
                "tracker = Log()\nimport torch\ntorch.save({}, 'x.pt')\n"
                "tracker.path = open('x.pt', 'w').name",
            ],
            "cannot rebuild `tracker` for the job: In [2] line 4 `tracker.path = open('x.pt', 'w').name`"
            " changes it and writes a file",
        ),
        (
            ["class Log:\n    pass", "import json\ntracker = Log()\njson.loads('1', cls=tracker)\nn = 1"],
            "cannot rebuild `tracker` for the job: In [2] line 3 `json.loads('1', cls=tracker)` calls a"
            " function that may change it",
        ),
    ],
)
def test_what_must_not_run_twice_is_refused_naming_cell_and_line(
    shell: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cells: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    run_anyway(shell, *cells)
    with pytest.raises(PackagingError) as error:
        package(shell, "print(tracker)")
    assert str(error.value).startswith(message), str(error.value)
    assert "\n" not in str(error.value)


def test_a_cell_marked_replay_is_replayed_whatever_it_does(shell: InteractiveShell, tmp_path: Path) -> None:
    run(
        shell,
        "class Tracker:\n    def __init__(self):\n        self.seen = 0\n"
        "    def update(self):\n        self.seen += 1",
        "# distrun: replay\nimport torch\nw = torch.zeros(1, requires_grad=True)\ntracker = Tracker()\n"
        "for _ in range(2):\n    w.sum().backward()\n    tracker.update()",
    )
    assert run_script(package(shell, "print(tracker.seen)"), tmp_path) == "2\n"


def test_configuration_statements_are_carried_in_order_and_left_outs_listed(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    run(
        shell,
        "import logging, random, warnings, os\nimport numpy as np\nimport torch\n"
        "logging.basicConfig(level=logging.INFO, format='%(levelname)s %(message)s')\n"
        "warnings.filterwarnings('ignore', category=DeprecationWarning)",
        "SEED = 3\nrandom.seed(SEED)\nnp.random.seed(SEED)\ntorch.manual_seed(SEED)\n"
        "torch.backends.cudnn.benchmark = False\nos.environ['MY_FLAG'] = '1'\nunused = 5\nos.chdir('.')",
        "print(random.random(), np.random.rand(), torch.rand(1).item())",
    )
    packaged = package(
        shell,
        "logging.info('hello from the job')\nprint(random.random(), np.random.rand(), torch.rand(1).item())",
    )
    import random

    import numpy as np
    import torch

    random.seed(3)
    np.random.seed(3)
    torch.manual_seed(3)
    first = f"{random.random()} {np.random.rand()} {torch.rand(1).item()}\n"
    folder = tmp_path / "job"
    folder.mkdir()
    assert run_script(packaged, folder) == first
    explained = "\n".join(packaged.explanation)
    assert "config In [1] line 4: `logging.basicConfig(" in explained
    assert "config In [2] line 5: `torch.backends.cudnn.benchmark = False`" in explained
    assert (
        "left out In [2] line 6: `os.environ['MY_FLAG'] = '1'`: os.environ changes reach the job" in explained
    )
    assert "left out In [2] line 7: `unused = 5`: binds unused, which the cell does not use" in explained
    assert "left out In [3] line 1: `print(random.random()" in explained
    assert "left out In [2] line 8: `os.chdir('.')`: the job gets the kernel's sys.path" in explained
    source = packaged.source
    assert (
        source.index("random.seed(SEED)")
        < source.index("torch.manual_seed(SEED)")
        < source.index("logging.info('hello")
    )


def test_logging_configured_in_a_first_cell_shows_the_jobs_info_lines(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    import subprocess

    run(shell, "import logging\nlogging.basicConfig(level=logging.INFO)")
    packaged = package(shell, "logging.info('step 1 loss 0.5')")
    script = tmp_path / "train.py"
    script.write_text(packaged.source)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "INFO:root:step 1 loss 0.5" in done.stderr


def test_replayed_statements_go_through_the_pitfall_checks_with_their_cell_line(
    shell: InteractiveShell,
) -> None:
    run_anyway(shell, "import torch", "model = torch.nn.Linear(2, 1)\nsize = 2\nmodel.cuda()")
    packaged = package(shell, "print(model)")
    where = {p.where for p in packaged.pitfalls if p.code == "cuda-without-device"}
    assert where == {"In [2] line 3"}, packaged.pitfalls


def test_ipython_only_names_are_reported_on_jupyterlabs_line(shell: InteractiveShell) -> None:
    with pytest.raises(PackagingError, match=r"^line 3 of the cell uses `get_ipython`"):
        package(shell, "x = 1\nget_ipython()", cell_line=2)


# --- real kernels, real 2-rank jobs ----------------------------------------------------------------


def _run_notebook(tmp_path: Path, cells: list[str]) -> nbformat.NotebookNode:
    nb = new_notebook(cells=[new_code_cell(c) for c in ["%load_ext jupyter_disttrain", *cells]])
    # Any error stops here with the cell and its output: a failed job fails its cell.
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    return nb


def _job_lines(job_root: Path) -> list[str]:
    """The ranks' lines of the one job, which succeeded."""
    (record,) = JobStore(job_root).records()
    job = api.get_job(record.id, JobStore(job_root))
    status = job.status()
    assert status.phase is JobPhase.SUCCEEDED, (status.message, [ln.text for ln in job.logs(tail=15)])
    return [ln.text for ln in job.logs() if ln.rank is not None]


@pytest.fixture
def job_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "jobs"
    monkeypatch.setenv("DISTTRAIN_JOB_ROOT", str(root))  # the kernel inherits it
    return root


def test_cell_split_ddp_script_with_parser_logging_seed_and_kernel_trained_model(
    tmp_path: Path, job_root: Path
) -> None:
    nb = _run_notebook(
        tmp_path,
        [
            "import argparse, logging, random\nimport torch\nimport torch.distributed as dist\n"
            "from torch.utils.data import DataLoader, TensorDataset\n"
            "logging.basicConfig(level=logging.INFO)\nrandom.seed(7)",
            "print('kernel-first', random.random())",
            "parser = argparse.ArgumentParser()\nparser.add_argument('--epochs', type=int, default=5)",
            "torch.manual_seed(0)\nmodel = torch.nn.Linear(4, 1)\n"
            "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))\n"
            "loader = DataLoader(data, batch_size=8)",
            "for xb, yb in loader:\n    opt.zero_grad()\n"
            "    torch.nn.functional.mse_loss(model(xb), yb).backward()\n    opt.step()\n"
            "print('kernel-bias', f'{model.bias.item():.6f}')",
            "%%distrun --gpus 2 --name mnist -- --epochs 1\n"
            "args = parser.parse_args()\ndist.init_process_group('gloo')\nrank = dist.get_rank()\n"
            "logging.info('rank %d epochs %d first %s bias %.6f', rank, args.epochs, random.random(),"
            " model.bias.item())\n"
            "ddp = torch.nn.parallel.DistributedDataParallel(model)\n"
            "sampler = torch.utils.data.distributed.DistributedSampler(data)\n"
            "for epoch in range(args.epochs):\n    sampler.set_epoch(epoch)\n"
            "    for xb, yb in DataLoader(data, batch_size=8, sampler=sampler):\n        opt.zero_grad()\n"
            "        torch.nn.functional.mse_loss(ddp(xb), yb).backward()\n        opt.step()\n"
            "dist.destroy_process_group()",
        ],
    )
    shown = nbformat.writes(nb)
    first = shown.split("kernel-first ")[1].split("\\n")[0]
    bias = shown.split("kernel-bias ")[1].split("\\n")[0]
    lines = _job_lines(job_root)
    for rank in (0, 1):
        assert f"INFO:root:rank {rank} epochs 1 first {first} bias {bias}" in lines, lines


def test_lightning_module_and_loader_built_in_earlier_cells(tmp_path: Path, job_root: Path) -> None:
    _run_notebook(
        tmp_path,
        [
            "import torch, lightning as L\nfrom torch.utils.data import DataLoader, TensorDataset",
            "class Lit(L.LightningModule):\n    def __init__(self):\n        super().__init__()\n"
            "        self.layer = torch.nn.Linear(4, 1)\n"
            "    def training_step(self, batch, batch_idx):\n        x, y = batch\n"
            "        return torch.nn.functional.mse_loss(self.layer(x), y)\n"
            "    def configure_optimizers(self):\n        return torch.optim.SGD(self.parameters(), lr=0.1)",
            "autoencoder = Lit()\n"
            "train_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)",
            "%%distrun --gpus 2 --name lit\n"
            "trainer = L.Trainer(devices=2, accelerator='cpu', max_epochs=1, logger=False,"
            " enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)\n"
            "trainer.fit(autoencoder, train_loader)\n"
            "print('world', trainer.world_size, 'rank', trainer.global_rank, 'steps', trainer.global_step)\n"
            "torch.distributed.destroy_process_group()",
        ],
    )
    lines = _job_lines(job_root)
    for rank in (0, 1):
        assert f"world 2 rank {rank} steps 2" in lines, lines


def test_accelerate_loop_whose_model_optimizer_and_loader_are_built_earlier(
    tmp_path: Path, job_root: Path
) -> None:
    _run_notebook(
        tmp_path,
        [
            "import torch\nfrom accelerate import Accelerator\n"
            "from torch.utils.data import DataLoader, TensorDataset",
            "model = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "dataloader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)",
            "%%distrun --gpus 2 --name acc\n"
            "accelerator = Accelerator()\n"
            "model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)\n"
            "for x, y in dataloader:\n    optimizer.zero_grad()\n"
            "    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))\n    optimizer.step()\n"
            "print('processes', accelerator.num_processes, 'batches', len(dataloader))\n"
            "accelerator.wait_for_everyone()\ntorch.distributed.destroy_process_group()",
        ],
    )
    assert _job_lines(job_root) == ["processes 2 batches 2"] * 2


def test_dry_run_explains_the_capture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("DISTTRAIN_JOB_ROOT", str(tmp_path / "jobs"))
    monkeypatch.chdir(tmp_path)
    InteractiveShell.clear_instance()
    ip = InteractiveShell.instance()
    try:
        run(
            ip,
            "%load_ext jupyter_disttrain",
            "import torch\ntorch.manual_seed(1)\nlr = 0.1\nbig = torch.zeros(1000)",
            "model = torch.nn.Linear(2, 1)\nmodel.bias.data.fill_(0.25)\nprint(model)",
        )
        run(ip, "%%distrun --gpus 2 --dry-run\nprint(model, lr, big.sum())")
    finally:
        InteractiveShell.clear_instance()
    out = capsys.readouterr().out
    assert "# capture: torch: import (In [2])" in out
    assert "# capture: config In [2] line 2: `torch.manual_seed(1)`" in out
    assert "# capture: lr: by value, inline (In [2])" in out
    assert "# capture: big: by value, side file captured_values.pt (In [2])" in out
    assert "# capture: model: by source, replaying In [3] line 1, In [3] line 2" in out
    assert "# capture: left out In [3] line 3: `print(model)`: reads `model` only" in out
    assert "    # In [3] line 2\n    model.bias.data.fill_(0.25)" in out
    assert not (tmp_path / "jobs").exists() or not list((tmp_path / "jobs").iterdir())


def test_replayed_objects_are_built_once_even_with_spawned_loader_workers(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    run(
        shell,
        "import torch\nfrom torch.utils.data import DataLoader, Dataset",
        "class Squares(Dataset):\n    def __init__(self):\n        print('built', flush=True)\n"
        "    def __len__(self):\n        return 4\n"
        "    def __getitem__(self, i):\n        return torch.tensor([float(i * i)])",
        'ds = Squares()\nds.note = """two\n  lines"""\nprint(ds.note)',
    )
    packaged = package(
        shell,
        "loader = DataLoader(ds, batch_size=2, num_workers=1, multiprocessing_context='spawn')\n"
        "print(repr(ds.note), [b.flatten().tolist() for b in loader])",
    )
    # A spawned worker re-imports the script: it finds Squares, and does not rebuild `ds`.
    assert run_script(packaged, tmp_path) == "built\n'two\\n  lines' [[0.0, 1.0], [4.0, 9.0]]\n"


def test_statements_sharing_a_line_are_replayed_alone(shell: InteractiveShell, tmp_path: Path) -> None:
    run(
        shell,
        "import torch",
        "model = torch.nn.Linear(2, 1); model.bias.data.fill_(2.0)  # note\n"
        "opt = torch.optim.SGD(model.parameters()); model.bias.data.add_(1.0)\n"
        "opt.zero_grad(); model(torch.ones(2)).sum().backward(); opt.step()",
    )
    packaged = package(shell, "print(round(float(model.bias), 3))")
    assert "opt = torch.optim" not in packaged.source and "backward" not in packaged.source
    assert "    model.bias.data.fill_(2.0)\n" in packaged.source
    assert "    model.bias.data.add_(1.0)\n" in packaged.source
    assert run_script(packaged, tmp_path) == f"{round(float(shell.user_ns['model'].bias), 3)}\n"


def test_a_function_that_only_reads_the_object_is_not_replayed(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    run(
        shell,
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset",
        "model = torch.nn.Sequential(torch.nn.Linear(2, 2))\n"
        "loader = DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2)",
        # A sanity check before training: evaluation mode, a pass over the data, a print.
        "def test(net, data):\n    net.eval()\n    size = data.batch_size\n    total = 0.0\n"
        "    with torch.no_grad():\n        for (x,) in data:\n            total += net(x).sum().item()\n"
        "    print('TESTED', size, total)\n    net.train()",
        "test(model, loader)",
        "def report():\n    print('PARAMS', sum(p.numel() for p in model.parameters()))",
        "report()",
        # What changes it is replayed: through a part of it, and through a name bound to a part.
        "def init(layer):\n    layer.weight.data.fill_(0.5)",
        "init(model[0])",
        "def shrink(net):\n    first = net[0]\n    first.bias.data.zero_()",
        "shrink(model)",
    )
    cell = "print(float(model[0].weight.sum()), float(model[0].bias.sum()), model.training)"
    packaged = package(shell, cell)
    assert "test(model, loader)" not in packaged.source and "report()" not in packaged.source
    assert "init(model[0])" in packaged.source and "shrink(model)" in packaged.source
    assert run_script(packaged, tmp_path) == "2.0 0.0 True\n"
    explained = "\n".join(packaged.explanation)
    assert "left out In [4] line 1: `test(model, loader)`: reads `model` only" in explained
    assert "left out In [6] line 1: `report()`: reads `model` only" in explained


def test_a_function_changing_its_argument_where_the_call_hides_which_is_replayed(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    run(
        shell,
        "import torch\nmodel = torch.nn.Linear(1, 1)",
        "def init(*layers):\n    for layer in layers:\n        layer.bias.data.fill_(2.0)",
        "init(model)",  # it reaches *layers: which name the body changes it by is not plain
        "def scale(m, factor=None):\n    m.bias.data.mul_(3.0)",
        "extra = []\nscale(*extra, model)",  # binds `m`, not `factor`: the call does not show it
    )
    packaged = package(shell, "print(float(model.bias))")
    assert "init(model)" in packaged.source and "scale(*extra, model)" in packaged.source
    assert run_script(packaged, tmp_path) == "6.0\n"


# --- dataclasses that hold objects, values that hold the kernel's own paths (issue 34) -----------

TOKENIZER = (
    "class Tokenizer:\n    def __init__(self, vocab):\n        self.vocab = vocab\n"
    "    def __call__(self, text):\n        return [self.vocab[w] for w in text.split()]"
)
COLLATOR = (
    "@dataclass\nclass Collator:\n    tokenizer: Tokenizer\n    pad: int = 0\n"
    "    def __call__(self, texts):\n        ids = [self.tokenizer(t) for t in texts]\n"
    "        longest = max(map(len, ids))\n        return [i + [self.pad] * (longest - len(i)) for i in ids]"
)


def test_a_dataclass_holding_an_object_is_rebuilt_by_the_statements_that_made_it(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    run(
        shell,
        "from dataclasses import dataclass",
        TOKENIZER,
        COLLATOR,
        "tokenizer = Tokenizer({'good': 2, 'bad': 3})\ncollator = Collator(tokenizer=tokenizer)",
        "plain = Collator(tokenizer=None, pad=-1)",  # plain fields: still sent by value
    )
    packaged = package(shell, "print(collator(['good bad', 'good']), plain.pad)")
    assert "    # In [4] line 2\n    collator = Collator(tokenizer=tokenizer)\n" in packaged.source
    assert "# In [5]\nplain = Collator(tokenizer=None, pad=-1)\n" in packaged.source
    assert run_script(packaged, tmp_path) == "[[2, 3], [2, 0]] -1\n"


def test_the_hf_text_classification_cells_package_with_their_data_collator(shell: InteractiveShell) -> None:
    pytest.importorskip("transformers")
    run(
        shell,
        "from tokenizers import Tokenizer, models, pre_tokenizers\n"
        "from transformers import DataCollatorWithPadding, PreTrainedTokenizerFast",
        # A tokenizer made here (no download), as AutoTokenizer.from_pretrained(...) makes one.
        "vocab = {'[PAD]': 0, '[UNK]': 1, 'good': 2, 'bad': 3}\n"
        "backend = Tokenizer(models.WordLevel(vocab, unk_token='[UNK]'))\n"
        "backend.pre_tokenizer = pre_tokenizers.Whitespace()\n"
        "tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token='[PAD]', unk_token='[UNK]')",
        "data_collator = DataCollatorWithPadding(tokenizer=tokenizer)",
    )
    packaged = package(
        shell, "print(data_collator([tokenizer('good bad'), tokenizer('good')])['input_ids'].tolist())"
    )
    assert (
        "    # In [3] line 1\n    data_collator = DataCollatorWithPadding(tokenizer=tokenizer)\n"
        in packaged.source
    )
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(packaged.source, "train.py", "exec"), {"__name__": "__main__"})
    assert printed.getvalue() == "[[2, 3], [2, 0]]\n"


def test_a_config_built_with_the_kernels_checkpoint_dir_points_at_the_jobs_in_the_job(
    shell: InteractiveShell,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DISTTRAIN_JOB_ROOT", str(tmp_path / "jobs"))
    monkeypatch.setenv("DISTTRAIN_VIEW", "text")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    monkeypatch.chdir(tmp_path)  # the kernel's own .disttrain is here
    run(
        shell,
        "%load_ext jupyter_disttrain",
        "import os\nfrom dataclasses import dataclass\nfrom jupyter_disttrain import em",
        "@dataclass\nclass TrainerConfig:\n    snapshot_path: str\n    max_epochs: int = 2",
        "config = TrainerConfig(snapshot_path=os.path.join(em.checkpoint_dir(), 'snapshot.pt'))",
        # A plain value whose statements may not run again (a file write): sent as it is, warned of.
        "logs = os.path.join(em.checkpoint_dir(), 'logs')\nos.makedirs(logs, exist_ok=True)\n"
        "open(os.path.join(logs, 'notes.txt'), 'w').close()",
    )
    cell = "print('snapshot', config.snapshot_path)\nprint('logs', logs)"
    cell = f"%%distrun --gpus 1 --accelerator cpu --name cfg\n{cell}"
    shell.run_cell(cell, store_history=True).raise_error()
    said = capsys.readouterr().out
    assert "warning: In [5] line 1: `logs` holds a path in this kernel's own .disttrain dir" in said, said
    assert "[silence: --no-check kernel-path]" in said
    store = JobStore(tmp_path / "jobs")
    (job_id,) = store.ids()
    job = api.get_job(job_id, store=store)
    assert job.status().phase is JobPhase.SUCCEEDED
    printed = dict(line.text.split(" ", 1) for line in job.logs())
    assert printed["snapshot"] == str(job.dir / "checkpoints" / "snapshot.pt")
    assert printed["logs"] == str(tmp_path / ".disttrain" / "checkpoints" / "logs")
