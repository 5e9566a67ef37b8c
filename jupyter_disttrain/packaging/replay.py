"""Rebuilding an object that cannot be sent by value from the statements that built it: the history slice.

A model, a DataLoader or an ArgumentParser made in an earlier cell is rebuilt in the job by the
statements of earlier cells that bound and changed it, in execution order: its latest assignment
(and the ones before it when that one reads the object, as in ``model = model.to(device)``), then
the method calls and attribute or item assignments on it (``parser.add_argument(...)``,
``model.fc = ...``). What those statements read is resolved in turn by the resolver (by value, by
source, or by another slice).

Statements that must not run twice are never replayed silently: a download, a file write, a
training step, or a call of an unknown function with the object. A training step on an object with
a ``state_dict`` (a module, an optimizer) is left out and the trained state is loaded instead. A
cell marked ``# distrun: replay`` is replayed whatever it does.

Process configuration (seeds, ``logging.basicConfig``, warning filters, cuDNN flags...) is carried
too, in order: :func:`config_statements`.
"""

from __future__ import annotations

import ast
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..model.errors import PackagingError
from .argeffects import changes_argument, flat_targets, root
from .history import REPLAY_MARK, HistoryIndex, Statement

# Methods that read an object without changing it: calling them in an earlier cell is left out.
_READ_METHODS = frozenset(
    {
        "parameters", "named_parameters", "state_dict", "children", "named_children", "modules",
        "named_modules", "buffers", "named_buffers", "numel", "size", "dim", "keys", "values", "items",
        "get", "format_help", "format_usage", "print_help", "print_usage", "parse_args",
        "parse_known_args", "extra_repr", "copy", "count", "index", "tolist", "item", "__len__",
    }
)  # fmt: skip
# Functions that only read their arguments (by their last dotted part).
_READ_FUNCTIONS = frozenset(
    {"print", "display", "len", "repr", "str", "type", "isinstance", "id", "format", "sum", "list",
     "next", "iter", "enumerate", "zip", "sorted", "max", "min", "vars", "dir", "hasattr", "getattr",
     "tqdm"}
)  # fmt: skip
_TRAIN_METHODS = frozenset({"backward", "step", "fit", "zero_grad", "manual_backward"})
_WRITE_CALLS = frozenset(
    {"save", "savez", "savez_compressed", "save_pretrained", "save_checkpoint", "to_csv", "to_parquet",
     "write", "write_text", "write_bytes", "dump", "mkdir", "makedirs", "rmtree", "remove", "unlink",
     "rename", "push_to_hub", "add_scalar", "log_metrics"}
)  # fmt: skip
_DOWNLOAD_CALLS = frozenset(
    {"urlretrieve", "urlopen", "download", "download_url", "download_and_extract_archive", "hf_hub_download",
     "snapshot_download"}
)  # fmt: skip
_DOWNLOAD_MODULES = ("requests.", "urllib.request.", "httpx.", "wget.")
# Process configuration carried into the script (full dotted names of the functions called).
CONFIG_CALLS = frozenset(
    {
        "logging.basicConfig", "logging.disable", "logging.captureWarnings", "torch.manual_seed",
        "torch.cuda.manual_seed", "torch.cuda.manual_seed_all", "torch.random.manual_seed", "random.seed",
        "numpy.random.seed", "torch.set_default_dtype", "torch.set_default_tensor_type",
        "torch.use_deterministic_algorithms", "torch.set_float32_matmul_precision", "torch.set_num_threads",
        "torch.set_printoptions", "warnings.filterwarnings", "warnings.simplefilter",
        "lightning.seed_everything",
        "lightning.pytorch.seed_everything", "pytorch_lightning.seed_everything",
        "lightning.fabric.utilities.seed.seed_everything", "lightning_fabric.utilities.seed.seed_everything",
        "transformers.set_seed", "accelerate.utils.set_seed", "numpy.set_printoptions",
    }
)  # fmt: skip
_CONFIG_ATTRIBUTES = ("torch.backends.",)
# What kernelenv.py carries from the kernel itself: never replayed, only explained.
_KERNEL_ENV_CALLS = frozenset(
    {"os.chdir", "sys.path.insert", "sys.path.append", "sys.path.extend", "os.environ.update",
     "os.environ.setdefault", "os.environ.pop", "os.putenv", "os.unsetenv"}
)  # fmt: skip


@dataclass
class Slice:
    """The statements that rebuild ``name``.

    Attributes:
        name: the object rebuilt.
        statements: what is replayed, in execution order.
        binds: every name the statements bind (a tuple assignment can bind several captured names).
        trained: training statements left out: the object's state is loaded instead.
        left_out: statements that mention the object but are not replayed (order -> why).
    """

    name: str
    statements: list[Statement] = field(default_factory=list)
    binds: set[str] = field(default_factory=set)
    trained: list[Statement] = field(default_factory=list)
    left_out: dict[int, str] = field(default_factory=dict)


class Slicer:
    """Finds slices and configuration statements in one history; ``stateful`` tells whether a live
    object's state can be carried by value (``state_dict``/``load_state_dict``)."""

    def __init__(
        self, index: HistoryIndex, user_ns: Mapping[str, Any], stateful: Callable[[Any], bool]
    ) -> None:
        self.index = index
        self.user_ns = user_ns
        self.stateful = stateful
        self._binders: dict[str, list[Statement]] | None = None

    def slice(self, name: str) -> Slice | None:
        """The statements that rebuild ``name``, or None when no replayable assignment binds it.

        Raises:
            PackagingError: the slice would replay something that must not run twice.
        """
        binders = self._binding_statements().get(name, [])
        if not binders or binders[-1].magic:
            return None
        out = Slice(name)
        start = len(binders) - 1
        while start > 0 and name in binders[start].use.free:  # `model = model.to(device)`
            start -= 1
        first = binders[start].order
        chosen: dict[int, Statement] = {}
        for stmt in self.index.statements:
            if stmt.order < first or stmt.magic or _is_definition(stmt.node):
                continue
            kind = self._kind(name, stmt)
            if kind is not None and self._replays(name, stmt, kind, out):
                chosen[stmt.order] = stmt
        out.statements = [chosen[k] for k in sorted(chosen)]
        out.binds = set().union(*(s.bound for s in out.statements))
        return out

    def _kind(self, name: str, stmt: Statement) -> str | None:
        """How ``stmt`` acts on ``name``: ``builds`` it, or (``_effect``) ``read``, ``change``,
        ``train``, ``unknown``; None when it does not reach it."""
        if name in stmt.bound:
            return "builds"
        if name in stmt.use.free:
            return self._effect(name, stmt)
        functions = self._reached(stmt)
        users = [f for f, free in functions.items() if name in free]
        if not users:
            return None
        # Through notebook functions that use it as a global (`train(3)`): their bodies tell.
        if self._runs_training(stmt.node):
            return "train"
        no_arguments = ast.Call(func=ast.Name(id=""), args=[], keywords=[])
        return "change" if any(self._changed_by(f, no_arguments, name) for f in users) else "read"

    def _replays(self, name: str, stmt: Statement, kind: str, out: Slice) -> bool:
        """Whether the slice of ``name`` replays ``stmt`` (acting on it as ``kind``); a statement
        left out says why in ``out.left_out`` (a trained one joins ``out.trained``).

        Raises:
            PackagingError: ``stmt`` must not run twice, nor be left out.
        """
        if kind == "read":
            out.left_out[stmt.order] = f"reads `{name}` only"
            return False
        if kind == "train" and not stmt.replay:
            if self.stateful(self.user_ns.get(name)):
                out.trained.append(stmt)
                out.left_out[stmt.order] = f"trains `{name}`: its trained state is loaded instead"
            elif _only_read_there(name, stmt.node):
                out.left_out[stmt.order] = f"a training step that reads `{name}` only"
            else:
                raise _refusal(name, stmt, "runs a training step")
            return False
        if kind == "unknown" and not stmt.replay:
            raise _refusal(name, stmt, "calls a function that may change it")
        self._check(name, stmt, "builds" if kind == "builds" else "changes")
        return True

    def config_statements(self) -> Iterator[tuple[Statement, str | None]]:
        """Every process-configuration statement of the history, with None (carried into the script)
        or why it is not (``os.environ`` changes travel in the job's environment)."""
        for stmt in self.index.statements:
            if stmt.magic:
                continue
            node = stmt.node
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                called = self.dotted(node.value.func)
                if called in CONFIG_CALLS:
                    yield stmt, None
                elif called in _KERNEL_ENV_CALLS:
                    yield (
                        stmt,
                        "the job gets the kernel's sys.path, environment and working dir as they are now",
                    )
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [self.dotted(t) for t in targets]
                if all(n.startswith(_CONFIG_ATTRIBUTES) for n in names):
                    yield stmt, None
                elif all(n.startswith("os.environ") for n in names):
                    yield stmt, "os.environ changes reach the job through its environment, as they are now"

    def dotted(self, node: ast.AST) -> str:
        """The full dotted name of ``node`` (``np.random.seed`` -> ``numpy.random.seed``), through the
        kernel's aliases; "" when it is not a plain name path."""
        parts: list[str] = []
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            if isinstance(node, ast.Attribute):
                parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return ""
        value = self.user_ns.get(node.id)
        if isinstance(value, types.ModuleType):
            root = value.__name__
        elif callable(value) and isinstance(getattr(value, "__module__", None), str):
            root = f"{value.__module__}.{getattr(value, '__qualname__', node.id)}"
        else:
            root = node.id
        return ".".join([root, *reversed(parts)])

    def _binding_statements(self) -> dict[str, list[Statement]]:
        if self._binders is None:
            self._binders = {}
            for stmt in self.index.statements:
                for bound in stmt.bound:
                    self._binders.setdefault(bound, []).append(stmt)
        return self._binders

    def _reached(self, stmt: Statement) -> dict[str, set[str]]:
        """The notebook functions ``stmt`` calls, transitively, with the globals each reads."""
        reached: dict[str, set[str]] = {}
        pending = [c.func.id for c in _calls(stmt.node) if isinstance(c.func, ast.Name)]
        while pending:
            called = pending.pop()
            definition = self.index.defs.get(called)
            if called in reached or definition is None or definition.kind != "source":
                continue
            reached[called] = set(definition.use.free)
            pending += list(definition.use.free)
        return reached

    def _deep_calls(self, node: ast.AST) -> Iterator[ast.Call]:
        """Calls in ``node`` and in the notebook functions it calls, transitively."""
        seen: set[str] = set()
        pending = [node]
        while pending:
            for call in _calls(pending.pop()):
                yield call
                if isinstance(call.func, ast.Name) and call.func.id not in seen:
                    seen.add(call.func.id)
                    definition = self.index.defs.get(call.func.id)
                    if definition is not None and definition.kind == "source" and definition.node is not None:
                        pending.append(definition.node)

    def _check(self, name: str, stmt: Statement, verb: str) -> None:
        """Refuse a replayed statement that downloads, writes files or trains (unless its cell says so)."""
        if stmt.replay:
            return
        for call in self._deep_calls(stmt.node):
            last = _last_part(call.func)
            full = self.dotted(call.func)
            if (
                last in _DOWNLOAD_CALLS
                or full.startswith(_DOWNLOAD_MODULES)
                or _keyword_true(call, "download")
            ):
                raise _refusal(name, stmt, f"{verb} it with a download")
            if last in _WRITE_CALLS or (last == "open" and _opens_for_writing(call)):
                raise _refusal(name, stmt, f"{verb} it and writes a file")
        if self._runs_training(stmt.node):
            raise _refusal(name, stmt, f"{verb} it with a training step")

    def _effect(self, name: str, stmt: Statement) -> str:
        """How ``stmt`` (which reads ``name`` without binding it) acts on it: ``read``, ``change``,
        ``train`` or ``unknown``."""
        if self._runs_training(stmt.node):
            return "train"
        effect = "read"
        # `loader = DataLoader(data)`, `ddp = DDP(model)`: building another object from it reads it.
        builds_other = isinstance(stmt.node, ast.Assign) and all(
            isinstance(t, ast.Name) for t in flat_targets(stmt.node.targets)
        )
        for node in ast.walk(stmt.node):
            found = self._node_effect(name, node, builds_other)
            if found == "unknown":
                return found
            effect = found or effect
        return effect

    def _node_effect(self, name: str, node: ast.AST, builds_other: bool) -> str | None:
        """What one node of a statement does to ``name``: ``change``, ``unknown`` (a call of a
        function that may change it), or None (reads it at most)."""
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            changed = any(root(t) == name and not isinstance(t, ast.Name) for t in flat_targets(targets))
            return "change" if changed else None
        if not isinstance(node, ast.Call):
            return None
        if isinstance(node.func, ast.Attribute) and root(node.func.value) == name:
            return "change" if node.func.attr not in _READ_METHODS else None
        if not any(root(arg, False) == name for arg in [*node.args, *(k.value for k in node.keywords)]):
            return None
        if _last_part(node.func) in _READ_FUNCTIONS or _last_part(node.func) in _WRITE_CALLS:
            return None
        if ".nn.init." in f".{self.dotted(node.func)}":
            return "change"
        if isinstance(node.func, ast.Name) and self._notebook_function(node.func):
            # Its body tells whether it changes the object or only reads it (`test(model, loader)`).
            return "change" if self._changed_by(node.func.id, node, name) else None
        return None if builds_other else "unknown"

    def _notebook_function(self, func: ast.expr) -> bool:
        if not isinstance(func, ast.Name):
            return False
        definition = self.index.defs.get(func.id)
        return definition is not None and definition.kind == "source"

    def _changed_by(self, function: str, call: ast.Call, name: str) -> bool:
        """Whether ``call`` of the notebook function ``function`` may change ``name``, as far as
        its body shows (a class or a lambda: it may)."""
        definition = self._function(function)
        return definition is None or changes_argument(
            definition, call, name, reads=_READ_METHODS, read_functions=_READ_FUNCTIONS, lookup=self._function
        )

    def _function(self, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The ``def`` of the notebook function ``name``; None for a class, a lambda, a value."""
        definition = self.index.defs.get(name)
        if definition is None or definition.kind != "source" or definition.node is None:
            return None
        found = [
            n
            for n in ast.walk(definition.node)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name
        ]
        return found[-1] if found else None

    def _runs_training(self, node: ast.AST) -> bool:
        """A training step in ``node``, or in a notebook function it calls (transitively)."""
        return any(
            isinstance(call.func, ast.Attribute) and call.func.attr in _TRAIN_METHODS
            for call in self._deep_calls(node)
        )


def _refusal(name: str, stmt: Statement, why: str) -> PackagingError:
    text = " ".join(stmt.text.split())
    text = text if len(text) <= 60 else text[:57] + "..."
    return PackagingError(
        f"cannot rebuild `{name}` for the job: {stmt.where} `{text}` {why}, which must not run again in"
        f" every process; build `{name}` inside the %%distrun cell, or put `{REPLAY_MARK}` in"
        f" In [{stmt.cell}] to replay it anyway (or make it plain data, arrays or tensors, which are sent by"
        " value)"
    )


def _is_definition(node: ast.stmt) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom))


def _calls(node: ast.AST) -> Iterator[ast.Call]:
    """Calls in ``node`` (a function's body for a def), not in nested definitions (run only when called)."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
    pending: list[ast.AST] = list(node.body) if isinstance(node, nested[:2]) else [node]
    while pending:
        current = pending.pop()
        if isinstance(current, ast.Call):
            yield current
        pending.extend(c for c in ast.iter_child_nodes(current) if not isinstance(c, nested))


def _last_part(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _keyword_true(call: ast.Call, keyword: str) -> bool:
    return any(
        k.arg == keyword and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in call.keywords
    )


def _opens_for_writing(call: ast.Call) -> bool:
    modes = [call.args[1]] if len(call.args) > 1 else [k.value for k in call.keywords if k.arg == "mode"]
    return any(
        isinstance(m, ast.Constant) and isinstance(m.value, str) and set(m.value) & set("wax+") for m in modes
    )


def _only_read_there(name: str, node: ast.AST) -> bool:
    """``name`` is only iterated or passed along in ``node`` (a DataLoader in a training loop)."""
    for child in ast.walk(node):
        if (
            isinstance(child, ast.Call)
            and isinstance(child.func, ast.Attribute)
            and root(child.func) == name
            and child.func.attr not in _READ_METHODS
        ):
            return False
        if isinstance(child, (ast.Assign, ast.AugAssign)):
            targets = child.targets if isinstance(child, ast.Assign) else [child.target]
            if any(root(t) == name and not isinstance(t, ast.Name) for t in flat_targets(targets)):
                return False
    return True
