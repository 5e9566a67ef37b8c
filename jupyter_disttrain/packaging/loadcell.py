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


def _class_calls(script: str, classes: list[str]) -> list[tuple[str, ast.Call]]:
    """(class, call) of every call of one of ``classes`` (``Net(...)``, ``torch.optim.SGD(...)``)."""
    try:
        tree = ast.parse(script)
    except SyntaxError:
        return []
    return [
        (name, node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and (name := _base_name(node.func)) is not None and name in classes
    ]


def model_call(script: str, classes: list[str]) -> tuple[str, str] | None:
    """(class, the call that built it) of the last model the script made with literal arguments,
    else (class, ``Class()``) of the last class it called; None when it made none."""
    found: tuple[str, str] | None = None
    for name, node in _class_calls(script, classes):
        literal = all(_is_literal(a) for a in [*node.args, *(k.value for k in node.keywords)])
        text = ast.get_source_segment(script, node) if literal else None
        # Arguments that are not literals (a variable): "Class(...)" says to fill them in.
        found = (name, text or f"{name}({'' if literal else '...'})")
    return found


def rebuild_call(script: str, cls: str) -> str | None:
    """The call that built the script's ``cls`` object, as written (``Net(128)``,
    ``torch.optim.SGD(model.parameters(), lr=0.1)``): its last one in the script, one with
    literal arguments preferred. The kernel runs it to rebuild a value that came back
    (``jobs/values.py``), as the load cell does to load a checkpoint."""
    calls = sorted((c for _, c in _class_calls(script, [cls])), key=lambda c: (c.lineno, c.col_offset))
    literal = [c for c in calls if all(_is_literal(a) for a in [*c.args, *(k.value for k in c.keywords)])]
    chosen = (literal or calls)[-1:]
    return ast.get_source_segment(script, chosen[0]) if chosen else None


def definitions(script: str, names: set[str]) -> str:
    """What rebuilding the script's objects elsewhere needs of it: its module-level imports, and
    the functions and classes among ``names`` it defines (decorators included), in order; none
    of its other statements."""
    try:
        tree = ast.parse(script)
    except SyntaxError:
        return ""
    lines = script.splitlines()
    out = []
    for node in tree.body:
        named = isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names
        if named or isinstance(node, (ast.Import, ast.ImportFrom)):
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            out.append("\n".join(lines[first - 1 : node.end_lineno]))
    return "\n".join(out) + "\n" if out else ""


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
