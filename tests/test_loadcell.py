"""packaging/loadcell.py: the cell that loads a checkpoint, from the job's script alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_disttrain.packaging.loadcell import load_cell, model_call, model_classes

SCRIPT = """
import torch
import pytorch_lightning as pl
from torch import nn


class Block(torch.nn.Module):
    pass


class Lit(pl.LightningModule):
    pass


class Helper:
    pass


width = int("4")
model = Block()
model = Lit(width, depth=2)
"""


def test_classes_and_the_call_that_built_the_model() -> None:
    assert model_classes(SCRIPT) == ["Block", "Lit"]
    # Lit was built last, with a variable: the cell leaves its arguments to fill in, and says so.
    assert model_call(SCRIPT, ["Block", "Lit"]) == ("Lit", "Lit(...)")
    assert model_call("model = Block(3, act='relu')\n", ["Block"]) == ("Block", "Block(3, act='relu')")
    assert model_classes("def broken(:\n") == []


def test_cells_per_kind() -> None:
    torch_cell = load_cell(SCRIPT, "torch", "/j/checkpoints/step_3.pt")
    assert (
        torch_cell.model_class == "Lit"
        and torch_cell.note == "pass Lit(...) the arguments the script gave it"
    )
    assert (
        "torch.load('/j/checkpoints/step_3.pt'" in torch_cell.code and "model = Lit(...)" in torch_cell.code
    )
    compile(torch_cell.code, "<cell>", "exec")  # Lit(...) is valid Python: an Ellipsis argument
    plain = load_cell("model = Block()\n" + SCRIPT.split("width")[0], "torch", "/j/step_1.pt")
    assert plain.note is None and "model = Block()" in plain.code
    ds = load_cell(SCRIPT, "deepspeed", "/j/checkpoints/ds/global_step5")
    assert "get_fp32_state_dict_from_zero_checkpoint('/j/checkpoints/ds', tag='global_step5')" in ds.code
    assert "DeepSpeed" in (ds.note or "")
    bare = load_cell("print(1)\n", "dcp", "/j/checkpoints/step_6")
    assert bare.model_class is None and "load_state_dict" not in bare.code
    assert "no nn.Module subclass" in (bare.note or "") and "dcp_to_torch_save" in bare.code


def test_a_directory_of_files_loads_its_models_file(tmp_path: Path) -> None:
    """Run for real: the model's file among optimizer and scheduler states (step_N/), and an HF
    Trainer checkpoint's model.safetensors."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    net = "from torch import nn\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    net += "        self.layer = nn.Linear(2, 2)\nmodel = Net()\n"
    weights = {"layer.weight": torch.full((2, 2), 3.0), "layer.bias": torch.ones(2)}
    step = tmp_path / "step_3"
    step.mkdir()
    torch.save({"model": weights}, step / "model.pt")
    torch.save({"m": torch.zeros(100)}, step / "optim.pt")  # the larger: not the model's
    hf = tmp_path / "checkpoint-3"
    hf.mkdir()
    save_file(weights, str(hf / "model.safetensors"))
    torch.save({"lr": 1}, hf / "optimizer.pt")
    for folder in (step, hf):
        cell = load_cell(net, "files", str(folder))
        assert cell.model_class == "Net" and "model.*" in (cell.note or "")
        namespace: dict[str, object] = {}
        exec(net, namespace)
        exec(cell.code, namespace)
        assert torch.equal(namespace["model"].state_dict()["layer.weight"], weights["layer.weight"])  # type: ignore[attr-defined]
