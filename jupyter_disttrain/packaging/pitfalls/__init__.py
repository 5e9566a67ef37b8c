"""Warnings about common mistakes in distributed (DDP) training code, read from the script's syntax tree.

The checks read everything that goes into the script (the cell and the functions and classes taken
from earlier cells, given as :class:`Block` s) as one module, so a save inside a training function
of an earlier cell is seen, and a function called only under ``if rank == 0:`` in the cell counts as
guarded. Each warning names the cell and line as JupyterLab shows them.

Each check has a stable code. A warning is silenced by passing its code in ``ignore`` or by a
trailing ``# distrun: ignore[code]`` (several codes: ``ignore[code-a, code-b]``) on one of the lines
of the flagged expression. The checks are heuristics on the text; they run nothing.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

CODES = (
    "sampler-set-epoch",
    "unguarded-save",
    "ddp-state-dict",
    "data-parallel",
    "hardcoded-rank",
    "cuda-without-device",
    "cuda-without-gpu",
    "world-size-mismatch",
    "unguarded-writer",
    "guarded-collective-save",
    # packaging/lightning_pitfalls.py
    "lightning-devices",
    "lightning-spawn",
)
_SILENCE = re.compile(r"#\s*distrun:\s*ignore\[([^\]]*)\]")
# Words that mark a condition as "only on one rank" (rank == 0, is_main_process, trainer.is_global_zero...).
_RANK_WORDS = (
    "rank",
    "is_main",
    "main_process",
    "master",
    "leader",
    "is_primary",
    "global_zero",
    "process_index",
)


@dataclass
class Pitfall:
    """A warning on the script.

    Attributes:
        code: stable id, e.g. "sampler-set-epoch".
        line: 1-based line number in its cell, as JupyterLab shows it.
        message: one line: what is wrong and what to write instead.
        cell: the earlier cell it is in ("In [3]"); "" for the ``%%distrun`` cell.
    """

    code: str
    line: int
    message: str
    cell: str = ""

    @property
    def where(self) -> str:
        """``line 4`` in the %%distrun cell, ``In [3] line 4`` in an earlier one."""
        return f"{self.cell} line {self.line}" if self.cell else f"line {self.line}"


@dataclass(frozen=True)
class Block:
    """A piece of code that goes into the script.

    Attributes:
        source: its text (module-level code).
        cell: the earlier cell it comes from ("In [3]"); "" for the ``%%distrun`` cell.
        first_line: the line of ``source``'s first line in that cell, as JupyterLab numbers it.
    """

    source: str
    cell: str = ""
    first_line: int = 1


@dataclass(frozen=True)
class Target:
    """What the job runs on, for the checks that depend on it.

    Attributes:
        world_size: processes in the job (``--gpus`` x ``--nodes``).
        flags: how the user asked for them, for messages ("--gpus 2 --nodes 1").
        no_gpu: why the job will have no GPU ("--accelerator cpu"), or None when it will have GPUs.
        nproc_per_node, nodes: ``--gpus`` and ``--nodes``, when known.
    """

    world_size: int
    flags: str
    no_gpu: str | None = None
    nproc_per_node: int | None = None  # --gpus
    nodes: int | None = None  # --nodes


Finding = tuple[str, ast.AST, str]


def check_pitfalls(
    source: str, ignore: Collection[str] = (), *, target: Target | None = None
) -> list[Pitfall]:
    """Look for DDP pitfalls in ``source`` (one cell); a cell that does not parse gives no warnings."""
    return check_blocks([Block(source)], ignore, target=target)


def check_blocks(
    blocks: Sequence[Block], ignore: Collection[str] = (), *, target: Target | None = None
) -> list[Pitfall]:
    """Look for DDP pitfalls in everything that goes into the script, read as one module.

    Args:
        blocks: the script's code in script order (a block that does not parse is left out).
        ignore: codes not to report (``"*"``: none at all).
        target: what the job runs on; without it the checks that depend on it do not run.

    Returns:
        The warnings, ordered by cell (earlier cells first) and line.
    """
    parsed = [b for b in blocks if _parses(b.source)]
    # Combined line -> (block, line in the block): blocks are joined one after the other.
    # Lines as the parser counts them (str.splitlines also splits at form feeds and the like).
    texts = [b.source.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n").split("\n") for b in parsed]
    owners = [(block, n) for block, text in zip(parsed, texts, strict=True) for n in range(1, len(text) + 1)]
    source = "\n".join("\n".join(text) for text in texts)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # blocks that parse alone always parse together; be safe anyway
        return []
    code = _Code(tree, target)
    silenced = silenced_codes(source)
    found = []
    from .lightning import CHECKS as LIGHTNING_CHECKS  # they build on this module

    for check in (*_CHECKS, *LIGHTNING_CHECKS):
        for name, node, message in check(code):
            lines = range(getattr(node, "lineno", 1), (getattr(node, "end_lineno", None) or 1) + 1)
            if name in ignore or "*" in ignore or any(name in silenced.get(line, ()) for line in lines):
                continue
            block, line = owners[min(getattr(node, "lineno", 1), len(owners)) - 1]
            found.append(Pitfall(name, block.first_line + line - 1, message, block.cell))
    order = {block.cell: i for i, block in enumerate(parsed)}
    return sorted(found, key=lambda p: (not p.cell, order.get(p.cell, 0), p.line, p.code))


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return True


def silenced_codes(source: str) -> dict[int, set[str]]:
    """Line -> codes silenced there by a ``# distrun: ignore[...]`` comment."""
    silenced: dict[int, set[str]] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT and (match := _SILENCE.search(token.string)):
                codes = {c.strip() for c in match.group(1).split(",") if c.strip()}
                silenced.setdefault(token.start[0], set()).update(codes)
    except (tokenize.TokenError, SyntaxError):
        pass
    return silenced


class _Code:
    """The script's tree with parent links and the lookups the checks share."""

    def __init__(self, tree: ast.Module, target: Target | None = None) -> None:
        self.tree = tree
        self.target = target
        self.parent: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node
        self.calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        self.functions = {
            n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        # The methods of top-level classes, by name (``self._run_epoch(...)`` is followed by name).
        self.methods: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for fn in cls.body:
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.methods.setdefault(fn.name, []).append(fn)
        self.imports = _imported(tree)  # top-level packages: "deepspeed", "lightning"...

    def ancestors(self, node: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
        """(ancestor, the child on the way down) pairs, innermost first."""
        while node in self.parent:
            yield self.parent[node], node
            node = self.parent[node]

    def calls_to(self, function: str) -> list[ast.Call]:
        return [c for c in self.calls if isinstance(c.func, ast.Name) and c.func.id == function]

    def callers(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Call] | None:
        """The calls of a top-level function (``f(...)``) or of a top-level class's method (any
        ``x.f(...)``: the owner is not known); None for any other def."""
        owner = self.parent.get(fn)
        if owner is self.tree:
            return self.calls_to(fn.name)
        if isinstance(owner, ast.ClassDef) and self.parent.get(owner) is self.tree:
            return [c for c in self.calls if isinstance(c.func, ast.Attribute) and c.func.attr == fn.name]
        return None

    def called(self, node: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        """The script's functions and methods ``node`` calls by name (one level)."""
        out: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            if isinstance(call.func, ast.Name) and call.func.id in self.functions:
                out.append(self.functions[call.func.id])
            elif isinstance(call.func, ast.Attribute):
                out += self.methods.get(call.func.attr, [])
        return out

    def scope(self, node: ast.AST) -> ast.AST | None:
        """The innermost function (or lambda) ``node`` is in; None at module level."""
        for ancestor, _ in self.ancestors(node):
            if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return ancestor
        return None


def _imported(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def _name(call: ast.Call) -> str:
    """The called name: ``f`` for ``f(...)`` and ``a.b.f(...)``."""
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for a chain of names and attributes, "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_constant(node: ast.AST | None, kind: type | tuple[type, ...], value: object = None) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(node, ast.Constant) or type(node.value) not in kinds:
        return False
    return value is None or node.value == value


def _words(node: ast.AST) -> list[str]:
    """The names, attributes and strings in an expression, lower-cased."""
    words = []
    for part in ast.walk(node):
        if isinstance(part, ast.Name):
            words.append(part.id.lower())
        elif isinstance(part, ast.Attribute):
            words.append(part.attr.lower())
        elif isinstance(part, ast.Constant) and isinstance(part.value, str):
            words.append(part.value.lower())
    return words


def _rankish(node: ast.AST) -> bool:
    """Whether an expression talks about the process rank (so it guards rank-0-only work)."""
    return any(w in word for word in _words(node) for w in _RANK_WORDS)


# --- sampler-set-epoch -------------------------------------------------------------------------


def _sampler_set_epoch(code: _Code) -> Iterator[Finding]:
    shuffling = [
        c
        for c in code.calls
        if _name(c) == "DistributedSampler" and not _is_constant(_keyword(c, "shuffle"), bool, False)
    ]
    if not shuffling:
        return
    for loop in _epoch_loops(code.tree):
        # set_epoch in the loop, or in a function or method it calls (one level, as for saves)
        if not _has_set_epoch(loop) and not any(_has_set_epoch(fn) for fn in code.called(loop)):
            yield (
                "sampler-set-epoch",
                loop,
                "DistributedSampler shuffles the same way every epoch unless told the epoch: call"
                " `sampler.set_epoch(epoch)` at the start of each epoch",
            )


def _has_set_epoch(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and _name(n) == "set_epoch" for n in ast.walk(node))


def _epoch_loops(tree: ast.AST) -> Iterator[ast.For | ast.AsyncFor]:
    """Outermost loops that look like epoch loops: ``for epoch in ...``, or a counted loop
    (``for _ in range(n)``) holding a loop. A loop over something else holding a loop (``for
    name, m in model.named_modules():``, over batches) is not one."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            target = _dotted(node.target).lower()
            loops = (ast.For, ast.AsyncFor, ast.While)
            inner = any(isinstance(n, loops) for n in ast.walk(node) if n is not node)
            if "epoch" in target or (inner and _counted(node.iter)):
                yield node
                continue
        yield from _epoch_loops(node)


def _counted(iterable: ast.AST) -> bool:
    """``range(n)``, ``trange(n)``, ``itertools.count()``, or one of them in a progress bar."""
    if not isinstance(iterable, ast.Call):
        return False
    if _name(iterable) in ("range", "trange", "count"):
        return True
    return any(_counted(arg) for arg in iterable.args[:1])


# --- unguarded-save ----------------------------------------------------------------------------


def _unguarded_save(code: _Code) -> Iterator[Finding]:
    engines = _deepspeed_engines(code)
    for call in code.calls:
        what = "" if _is_collective_save(call, engines) else _save_kind(call)
        if what and not _guarded(code, call, set()):
            yield (
                "unguarded-save",
                call,
                f"every rank runs `{what}` and writes the same file: save only on rank 0, e.g. under"
                " `if dist.get_rank() == 0:`",
            )


def _save_kind(call: ast.Call) -> str:
    dotted = _dotted(call.func)
    name = _name(call)
    if dotted == "torch.save":
        return "torch.save(...)"
    if name == "save_checkpoint" and "trainer" not in dotted.lower():
        # Lightning's trainer.save_checkpoint must be called on every rank; it saves once by itself.
        return f"{dotted or name}(...)"
    if name == "save_pretrained" and _keyword(call, "is_main_process") is None:
        return f"{dotted or name}(...)"
    return ""


def _guarded(code: _Code, node: ast.AST, seen: set[str], test: Callable[[ast.AST], bool] = _rankish) -> bool:
    """Whether ``node`` only runs when ``test`` holds (by default: on one rank): under such a
    condition, after an early exit on it, or inside a function only called from such places."""
    for ancestor, child in code.ancestors(node):
        conditional = (ast.If, ast.IfExp, ast.While)
        if isinstance(ancestor, conditional) and child is not ancestor.test and test(ancestor.test):
            return True
        if isinstance(ancestor, ast.BoolOp) and any(test(v) for v in ancestor.values if v is not child):
            return True
        if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            test(d) for d in ancestor.decorator_list
        ):
            return True
        if isinstance(child, ast.stmt) and _after_exit(ancestor, child, test):
            return True
        if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef)):
            callers = code.callers(ancestor)  # of a top-level function, or of a top-level class's method
            if callers is not None:
                if ancestor.name in seen or not callers:
                    return False
                return all(_guarded(code, c, seen | {ancestor.name}, test) for c in callers)
    return False


def _after_exit(block: ast.AST, stmt: ast.stmt, test: Callable[[ast.AST], bool]) -> bool:
    """``if rank != 0: return`` (or continue/break/raise), or ``assert torch.cuda.is_available()``,
    earlier in the same block as ``stmt``."""
    for field in ("body", "orelse", "finalbody"):
        statements = getattr(block, field, None)
        if isinstance(statements, list) and stmt in statements:
            for earlier in statements[: statements.index(stmt)]:
                if isinstance(earlier, ast.Assert) and test(earlier.test):
                    return True
                if (
                    isinstance(earlier, ast.If)
                    and test(earlier.test)
                    and isinstance(earlier.body[-1], (ast.Return, ast.Continue, ast.Break, ast.Raise))
                ):
                    return True
    return False


# --- unguarded-writer -------------------------------------------------------------------------


def _unguarded_writer(code: _Code) -> Iterator[Finding]:
    """A TensorBoard writer made on every rank: each rank writes its own event file into the same
    directory, which TensorBoard then shows as one run whose every point comes N times."""
    for call in code.calls:
        if _name(call) != "SummaryWriter" or _guarded(code, call, set()):
            continue
        where = [*call.args[:1], *(k.value for k in call.keywords if k.arg in ("log_dir", "logdir"))]
        if any(_rankish(w) for w in where):  # a directory per rank: f"runs/rank{rank}"
            continue
        yield (
            "unguarded-writer",
            call,
            "every rank creates this SummaryWriter and writes into the same directory: create it only"
            " on rank 0 (`if dist.get_rank() == 0:`), or log with `em` (from jupyter_disttrain), which"
            " records on rank 0 by itself",
        )


# --- guarded-collective-save -------------------------------------------------------------------


def _deepspeed_engines(code: _Code) -> set[str]:
    """Names bound to what ``deepspeed.initialize`` returns (the engine is its first element)."""
    names: set[str] = set()
    for node in ast.walk(code.tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if _dotted(node.value.func) not in ("deepspeed.initialize", "initialize"):
                continue
            for target in node.targets:
                first = target.elts[0] if isinstance(target, ast.Tuple | ast.List) and target.elts else target
                if _dotted(first):
                    names.add(_dotted(first))
    return names


def _is_collective_save(call: ast.Call, engines: set[str]) -> bool:
    """A DeepSpeed engine's ``save_checkpoint``: every rank must call it (each writes its shard)."""
    if _name(call) != "save_checkpoint" or not isinstance(call.func, ast.Attribute):
        return False
    owner = _dotted(call.func.value)
    return owner in engines or (bool(engines) and "engine" in owner.lower())


def _guarded_collective_save(code: _Code) -> Iterator[Finding]:
    engines = _deepspeed_engines(code)
    for call in code.calls:
        if _is_collective_save(call, engines) and _guarded(code, call, set()):
            yield (
                "guarded-collective-save",
                call,
                f"DeepSpeed's `{_dotted(call.func)}(...)` is collective: every rank must call it (each"
                " saves its part, rank 0 alone waits forever); call it on all ranks, without the rank"
                " condition",
            )


# --- ddp-state-dict ----------------------------------------------------------------------------


def _ddp_state_dict(code: _Code) -> Iterator[Finding]:
    # Scope (a function, None for module level) -> names bound to a DDP-wrapped model -> from which line.
    wrapped: dict[ast.AST | None, dict[str, int]] = {}
    for node in ast.walk(code.tree):
        if isinstance(node, ast.Assign) and _is_ddp(node.value):
            for target in node.targets:
                if _dotted(target):
                    wrapped.setdefault(code.scope(node), {}).setdefault(_dotted(target), node.lineno)
    for _ in range(3):  # a wrapped model passed on to a function, and from there to another
        for call in code.calls:
            function = code.functions.get(call.func.id) if isinstance(call.func, ast.Name) else None
            if function is None:
                continue
            params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
            passed = [*zip(params, call.args, strict=False), *((k.arg, k.value) for k in call.keywords)]
            for param, value in passed:
                if param and _wrapped_at(code, wrapped, value, call):
                    wrapped.setdefault(function, {})[param] = 0
    for call in code.calls:
        if isinstance(call.func, ast.Attribute) and call.func.attr == "state_dict":
            owner = call.func.value
            if _wrapped_at(code, wrapped, owner, call):
                name = _dotted(owner)
                yield (
                    "ddp-state-dict",
                    call,
                    f"`{name}` is wrapped in DistributedDataParallel, so its state_dict keys start with"
                    f" 'module.': save `{name}.module.state_dict()` so it loads into a plain model",
                )


def _is_ddp(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _name(node) in ("DistributedDataParallel", "DDP")


def _wrapped_at(
    code: _Code, wrapped: dict[ast.AST | None, dict[str, int]], node: ast.AST, at: ast.AST
) -> bool:
    """Whether ``node`` (read where ``at`` is) is a DDP-wrapped model: wrapped earlier in the same
    function (or passed in wrapped), or a module-level name the function reads as a global."""
    if _is_ddp(node):
        return True
    name = _dotted(node)
    scope = code.scope(at)
    line = wrapped.get(scope, {}).get(name)
    if line is not None:
        return getattr(at, "lineno", 0) >= line
    if scope is None or name not in wrapped.get(None, {}):
        return False
    return name.split(".")[0] not in _locals(scope)


def _locals(function: ast.AST) -> set[str]:
    """Names a function binds itself (so they are not the module's)."""
    args = getattr(function, "args", None)
    names = {a.arg for a in ast.walk(args) if isinstance(a, ast.arg)} if args is not None else set()
    declared = {n for node in ast.walk(function) if isinstance(node, ast.Global) for n in node.names}
    stored = {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return (names | stored) - declared


# --- data-parallel -----------------------------------------------------------------------------


def _data_parallel(code: _Code) -> Iterator[Finding]:
    for call in code.calls:
        if _name(call) == "DataParallel":
            yield (
                "data-parallel",
                call,
                "nn.DataParallel drives several GPUs from one process and does not combine with torchrun:"
                " use DistributedDataParallel(model, device_ids=[local_rank])",
            )


# --- hardcoded-rank ----------------------------------------------------------------------------


def _hardcoded_rank(code: _Code) -> Iterator[Finding]:
    for call in code.calls:
        if _name(call) != "init_process_group":
            continue
        # init_process_group(backend, init_method, timeout, world_size, rank, ...)
        fixed = []
        for position, keyword in ((3, "world_size"), (4, "rank")):
            value = _keyword(call, keyword)
            if value is None and len(call.args) > position:
                value = call.args[position]
            if _is_constant(value, int):
                fixed.append(keyword)
        if fixed:
            names = " and ".join(f"{k}=" for k in fixed)
            yield (
                "hardcoded-rank",
                call,
                f"init_process_group with a number for {names} fixes what torchrun sets for each"
                f" process: drop it (torchrun passes it in the environment) or read"
                f" int(os.environ['{fixed[-1].upper()}'])",
            )


# --- cuda-without-device -----------------------------------------------------------------------


def _cuda_without_device(code: _Code) -> Iterator[Finding]:
    if any(_name(c) == "set_device" for c in code.calls):
        return
    for call in code.calls:
        name = _name(call)
        method = isinstance(call.func, ast.Attribute)
        bare_cuda = name == "cuda" and method and not call.args and not call.keywords
        first = call.args[0] if call.args else None
        to_cuda = (
            name == "to"
            and method
            and (_is_constant(first, str, "cuda") or _is_constant(_keyword(call, "device"), str, "cuda"))
        )
        device_cuda = _dotted(call.func) in ("torch.device", "device") and _is_constant(first, str, "cuda")
        device_cuda = device_cuda and len(call.args) == 1 and not call.keywords
        if bare_cuda or to_cuda or device_cuda:
            yield (
                "cuda-without-device",
                call,
                "'cuda' without an index means GPU 0 on every rank: call"
                " `torch.cuda.set_device(int(os.environ['LOCAL_RANK']))` first, or use"
                " f'cuda:{local_rank}'",
            )


# --- cuda-without-gpu --------------------------------------------------------------------------


def _cuda_without_gpu(code: _Code) -> Iterator[Finding]:
    if code.target is None or code.target.no_gpu is None:
        return
    for call in code.calls:
        what = _gpu_only(call)
        if what and not _guarded(code, call, set(), _gpuish):
            yield (
                "cuda-without-gpu",
                call,
                f"this job has no GPU ({code.target.no_gpu}) and `{what}` fails without one: run it only"
                " `if torch.cuda.is_available():` (on CPU use the gloo backend and the 'cpu' device)",
            )


def _gpu_only(call: ast.Call) -> str:
    """What the call does that needs a GPU ("" if nothing)."""
    name = _name(call)
    method = isinstance(call.func, ast.Attribute)
    first = call.args[0] if call.args else None
    if name == "set_device" and "cuda" in _dotted(call.func):
        return "torch.cuda.set_device(...)"
    if name == "cuda" and method:
        return ".cuda()"
    if name == "init_process_group" and _is_constant(_keyword(call, "backend") or first, str, "nccl"):
        return 'init_process_group("nccl")'
    device = _keyword(call, "device") or first
    if name == "to" and method and isinstance(device, ast.Constant) and str(device.value).startswith("cuda"):
        return f".to({device.value!r})"
    return ""


def _gpuish(node: ast.AST) -> bool:
    """Whether a condition asks about GPUs (torch.cuda.is_available(), device_count(), args.cuda...)."""
    return any(w in word for word in _words(node) for w in ("cuda", "gpu", "is_available", "device_count"))


# --- world-size-mismatch -----------------------------------------------------------------------


def _world_size_mismatch(code: _Code) -> Iterator[Finding]:
    if code.target is None:
        return
    constants = _int_constants(code.tree)
    for call in code.calls:
        name = _name(call)
        if name == "init_process_group":
            value = _keyword(call, "world_size") or (call.args[3] if len(call.args) > 3 else None)
        elif _dotted(call.func) in ("mp.spawn", "multiprocessing.spawn", "torch.multiprocessing.spawn"):
            value = _keyword(call, "nprocs") or (call.args[2] if len(call.args) > 2 else None)
        else:
            continue
        size = _int_value(value, constants)
        if size is not None and size != code.target.world_size:
            yield (
                "world-size-mismatch",
                call,
                f"this asks for {size} processes but the job runs {code.target.world_size}"
                f" ({code.target.flags}): read int(os.environ['WORLD_SIZE']) instead, or change the flags",
            )


def _int_constants(tree: ast.Module) -> dict[str, int]:
    """Module-level names assigned an int literal exactly once (``n_gpus = 2``)."""
    seen: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            seen.setdefault(node.id, []).append(node)
    out: dict[str, int] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value = stmt.targets[0].id, _int_value(stmt.value, {})
            if value is not None and len(seen.get(target, [])) == 1:
                out[target] = value
    return out


def _int_value(node: ast.AST | None, constants: dict[str, int]) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


_CHECKS: tuple[Callable[[_Code], Iterator[Finding]], ...] = (
    _sampler_set_epoch,
    _unguarded_save,
    _ddp_state_dict,
    _data_parallel,
    _hardcoded_rank,
    _cuda_without_device,
    _cuda_without_gpu,
    _world_size_mismatch,
    _unguarded_writer,
    _guarded_collective_save,
)
