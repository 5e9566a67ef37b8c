"""packaging/loadcell.py: the cell that loads a checkpoint, from the job's script alone."""

from __future__ import annotations

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
