"""The code of a notebook cell that loads a job's checkpoint in the kernel ("Load in notebook").

The packaged script knows the model: the ``nn.Module`` (or ``LightningModule``) subclasses it
defines, and how it built one (``model = Net(128)``). The cell rebuilds that model (the kernel
has the class where the notebook defined it) and loads the weights, found under the usual keys
of a ``torch.save`` file: the state dict itself, ``model``, ``state_dict`` or ``module`` (DDP's
``module.`` prefix taken off). DCP and DeepSpeed directories need their own loaders; of a
directory of files saved together, the model's file is loaded.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

_MODULE_BASES = {"Module", "LightningModule"}  # nn.Module, torch.nn.Module, pl.LightningModule...

_FIND_WEIGHTS = """\
# The weights: the state dict itself, or under one of the usual keys; DDP's "module." prefix off.
for key in ("model", "state_dict", "module"):
    if isinstance(state, dict) and isinstance(state.get(key), dict):
        state = state[key]
        break
state = {k.removeprefix("module."): v for k, v in state.items()}
"""

# A directory of files saved together (step_300/{model,optim}.pt, an HF Trainer checkpoint-300/):
# the model's file among them, else the largest.
_PICK_WEIGHTS = """\
folder = {folder!r}
names = sorted(n for n in os.listdir(folder) if n.endswith((".safetensors", ".pt", ".pth", ".bin")))
sizes = {{n: os.path.getsize(os.path.join(folder, n)) for n in names}}
name = next((n for n in names if n.startswith(("model", "pytorch_model"))), None) or max(names, key=sizes.get)
if name.endswith(".safetensors"):
    from safetensors.torch import load_file

    state = load_file(os.path.join(folder, name))
else:
    state = torch.load(os.path.join(folder, name), map_location="cpu", weights_only=False)
"""


@dataclass(frozen=True)
class LoadCell:
    code: str
    model_class: str | None
    note: str | None


def model_classes(script: str) -> list[str]:
    """The ``nn.Module``/``LightningModule`` subclasses the script defines, in order."""
    try:
        tree = ast.parse(script)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(_base_name(b) in _MODULE_BASES for b in node.bases):
            out.append(node.name)
    return out


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def model_call(script: str, classes: list[str]) -> tuple[str, str] | None:
    """(class, the call that built it) of the last model the script made with literal arguments,
    else (class, ``Class()``) of the last class it called; None when it made none."""
    try:
        tree = ast.parse(script)
    except SyntaxError:
        return None
    found: tuple[str, str] | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in classes:
            literal = all(_is_literal(a) for a in [*node.args, *(k.value for k in node.keywords)])
            text = ast.get_source_segment(script, node) if literal else None
            # Arguments that are not literals (a variable): "Class(...)" says to fill them in.
            found = (node.func.id, text or f"{node.func.id}({'' if literal else '...'})")
    return found


def _is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


def load_cell(script: str, kind: str, path: str) -> LoadCell:
    """The cell that loads the checkpoint ``path`` of ``kind`` with the script's model."""
    classes = model_classes(script)
    call = model_call(script, classes) or ((classes[-1], f"{classes[-1]}()") if classes else None)
    cls = call[0] if call else None
    build = f"model = {call[1]}  # {cls}: defined in the job's script (run that cell first)\n" if call else ""
    load = "model.load_state_dict(state)\n" if call else ""
    if kind == "dcp":
        code = (
            "import torch\nfrom torch.distributed.checkpoint.format_utils import dcp_to_torch_save\n\n"
            f"dcp_to_torch_save({path!r}, 'checkpoint.pt')  # one file, loadable without a process group\n"
            "state = torch.load('checkpoint.pt', map_location='cpu', weights_only=False)\n"
            f"{_FIND_WEIGHTS}{build}{load}"
        )
        note = "DCP directory: converted to one torch.save file with dcp_to_torch_save, then loaded"
    elif kind == "deepspeed":
        save_dir, _, tag = path.rstrip("/").rpartition("/")
        code = (
            "from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint\n\n"
            f"state = get_fp32_state_dict_from_zero_checkpoint({save_dir!r}, tag={tag!r})\n"
            f"{build}{load}"
        )
        note = (
            "DeepSpeed checkpoint: its ZeRO shards are merged into one fp32 state dict by DeepSpeed's loader"
        )
    elif kind == "files":
        code = f"import os\nimport torch\n\n{_PICK_WEIGHTS.format(folder=path)}{_FIND_WEIGHTS}{build}{load}"
        note = "a directory of files: the model's weights among them are loaded (model.* first)"
    else:
        code = (
            f"import torch\n\nstate = torch.load({path!r}, map_location='cpu', weights_only=False)\n"
            f"{_FIND_WEIGHTS}{build}{load}"
        )
        note = None
    if call is not None and call[1].endswith("(...)"):
        note = "; ".join(filter(None, [note, f"pass {cls}(...) the arguments the script gave it"]))
    if cls is None:
        note = "; ".join(
            filter(None, [note, "the script defines no nn.Module subclass: the state dict is loaded"])
        )
    return LoadCell(code, cls, note)
