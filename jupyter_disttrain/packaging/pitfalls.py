"""Warnings about common mistakes in distributed (DDP) training code, read from the cell's syntax tree.

Each check has a stable code. A warning is silenced by passing its code in ``ignore`` or by a
trailing ``# distrun: ignore[code]`` (several codes: ``ignore[code-a, code-b]``) on one of the lines
of the flagged expression. The checks are heuristics: they look only at the cell's own text.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

CODES = (
    "sampler-set-epoch",
    "unguarded-save",
    "ddp-state-dict",
    "data-parallel",
    "hardcoded-rank",
    "cuda-without-device",
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
    """A warning on the cell.

    Attributes:
        code: stable id, e.g. "sampler-set-epoch".
        line: 1-based line number in the cell.
        message: one line: what is wrong and what to write instead.
    """

    code: str
    line: int
    message: str


Finding = tuple[str, ast.AST, str]


def check_pitfalls(source: str, ignore: Collection[str] = ()) -> list[Pitfall]:
    """Look for DDP pitfalls in ``source`` (a cell); a cell that does not parse gives no warnings.

    Args:
        source: the cell's code.
        ignore: codes not to report (``"*"``: none at all).

    Returns:
        The warnings, ordered by line.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    code = _Code(tree)
    silenced = silenced_codes(source)
    found = []
    for check in _CHECKS:
        for name, node, message in check(code):
            lines = range(getattr(node, "lineno", 1), (getattr(node, "end_lineno", None) or 1) + 1)
            if name in ignore or "*" in ignore or any(name in silenced.get(line, ()) for line in lines):
                continue
            found.append(Pitfall(name, getattr(node, "lineno", 1), message))
    return sorted(found, key=lambda p: (p.line, p.code))


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
    """The cell's tree with parent links and the lookups the checks share."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parent: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node
        self.calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        self.functions = {
            n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }

    def ancestors(self, node: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
        """(ancestor, the child on the way down) pairs, innermost first."""
        while node in self.parent:
            yield self.parent[node], node
            node = self.parent[node]

    def calls_to(self, function: str) -> list[ast.Call]:
        return [c for c in self.calls if isinstance(c.func, ast.Name) and c.func.id == function]


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


def _rankish(node: ast.AST) -> bool:
    """Whether an expression talks about the process rank (so it guards rank-0-only work)."""
    words = []
    for part in ast.walk(node):
        if isinstance(part, ast.Name):
            words.append(part.id)
        elif isinstance(part, ast.Attribute):
            words.append(part.attr)
        elif isinstance(part, ast.Constant) and isinstance(part.value, str):
            words.append(part.value)
    return any(w in word.lower() for word in words for w in _RANK_WORDS)


# --- sampler-set-epoch -------------------------------------------------------------------------


def _sampler_set_epoch(code: _Code) -> Iterator[Finding]:
    shuffling = [
        c
        for c in code.calls
        if _name(c) == "DistributedSampler" and not _is_constant(_keyword(c, "shuffle"), bool, False)
    ]
    if not shuffling:
        return
    setters = {name for name, fn in code.functions.items() if _has_set_epoch(fn)}
    for loop in _epoch_loops(code.tree):
        called = {
            n.func.id for n in ast.walk(loop) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        }
        if not _has_set_epoch(loop) and not called & setters:
            yield (
                "sampler-set-epoch",
                loop,
                "DistributedSampler shuffles the same way every epoch unless told the epoch: call"
                " `sampler.set_epoch(epoch)` at the start of each epoch",
            )


def _has_set_epoch(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and _name(n) == "set_epoch" for n in ast.walk(node))


def _epoch_loops(tree: ast.AST) -> Iterator[ast.For | ast.AsyncFor]:
    """Outermost loops that look like epoch loops: ``for epoch in ...`` or a loop holding a loop."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            target = _dotted(node.target).lower()
            loops = (ast.For, ast.AsyncFor, ast.While)
            inner = any(isinstance(n, loops) for n in ast.walk(node) if n is not node)
            if "epoch" in target or inner:
                yield node
                continue
        yield from _epoch_loops(node)


# --- unguarded-save ----------------------------------------------------------------------------


def _unguarded_save(code: _Code) -> Iterator[Finding]:
    for call in code.calls:
        what = _save_kind(call)
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


def _guarded(code: _Code, node: ast.AST, seen: set[str]) -> bool:
    """Whether ``node`` only runs on one rank: under a rank test, after a rank early-exit, or inside
    a cell function that is only called from such places."""
    for ancestor, child in code.ancestors(node):
        conditional = (ast.If, ast.IfExp, ast.While)
        if isinstance(ancestor, conditional) and child is not ancestor.test and _rankish(ancestor.test):
            return True
        if isinstance(ancestor, ast.BoolOp) and any(_rankish(v) for v in ancestor.values if v is not child):
            return True
        if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            _rankish(d) for d in ancestor.decorator_list
        ):
            return True
        if isinstance(child, ast.stmt) and _after_rank_exit(ancestor, child):
            return True
        top_level = code.parent.get(ancestor) is code.tree
        if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef)) and top_level:
            callers = code.calls_to(ancestor.name)
            if ancestor.name in seen or not callers:
                return False
            return all(_guarded(code, c, seen | {ancestor.name}) for c in callers)
    return False


def _after_rank_exit(block: ast.AST, stmt: ast.stmt) -> bool:
    """``if rank != 0: return`` (or continue/break/raise) earlier in the same block as ``stmt``."""
    for field in ("body", "orelse", "finalbody"):
        statements = getattr(block, field, None)
        if isinstance(statements, list) and stmt in statements:
            for earlier in statements[: statements.index(stmt)]:
                if (
                    isinstance(earlier, ast.If)
                    and _rankish(earlier.test)
                    and isinstance(earlier.body[-1], (ast.Return, ast.Continue, ast.Break, ast.Raise))
                ):
                    return True
    return False


# --- ddp-state-dict ----------------------------------------------------------------------------


def _ddp_state_dict(code: _Code) -> Iterator[Finding]:
    wrapped: dict[str, int] = {}
    for node in ast.walk(code.tree):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
            continue
        if _name(node.value) in ("DistributedDataParallel", "DDP"):
            for target in node.targets:
                if _dotted(target):
                    wrapped.setdefault(_dotted(target), node.lineno)
    for call in code.calls:
        if isinstance(call.func, ast.Attribute) and call.func.attr == "state_dict":
            owner = _dotted(call.func.value)
            if owner in wrapped and call.lineno >= wrapped[owner]:
                yield (
                    "ddp-state-dict",
                    call,
                    f"`{owner}` is wrapped in DistributedDataParallel, so its state_dict keys start with"
                    f" 'module.': save `{owner}.module.state_dict()` so it loads into a plain model",
                )


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


_CHECKS: tuple[Callable[[_Code], Iterator[Finding]], ...] = (
    _sampler_set_epoch,
    _unguarded_save,
    _ddp_state_dict,
    _data_parallel,
    _hardcoded_rank,
    _cuda_without_device,
)
