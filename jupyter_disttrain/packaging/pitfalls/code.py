"""What the pitfall checks read: the script's tree with parent links and the lookups they share
(``Code``), what the job runs on (``Target``), and the small readings of syntax every check uses
(a call's name, a dotted name, a keyword, an int constant, whether a node runs on one rank only).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

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


# (its code, the node it flags, the message)
Finding = tuple[str, ast.AST, str]


class Code:
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
        self.imports = imported(tree)  # top-level packages: "deepspeed", "lightning"...

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


def imported(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def call_name(call: ast.Call) -> str:
    """The called name: ``f`` for ``f(...)`` and ``a.b.f(...)``."""
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def dotted_name(node: ast.AST) -> str:
    """``a.b.c`` for a chain of names and attributes, "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def keyword_arg(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def is_constant(node: ast.AST | None, kind: type | tuple[type, ...], value: object = None) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(node, ast.Constant) or type(node.value) not in kinds:
        return False
    return value is None or node.value == value


def words(node: ast.AST) -> list[str]:
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


def rankish(node: ast.AST) -> bool:
    """Whether an expression talks about the process rank (so it guards rank-0-only work)."""
    return any(w in word for word in words(node) for w in _RANK_WORDS)


def guarded(code: Code, node: ast.AST, seen: set[str], test: Callable[[ast.AST], bool] = rankish) -> bool:
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
        if isinstance(child, ast.stmt) and after_exit(ancestor, child, test):
            return True
        if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef)):
            callers = code.callers(ancestor)  # of a top-level function, or of a top-level class's method
            if callers is not None:
                if ancestor.name in seen or not callers:
                    return False
                return all(guarded(code, c, seen | {ancestor.name}, test) for c in callers)
    return False


def after_exit(block: ast.AST, stmt: ast.stmt, test: Callable[[ast.AST], bool]) -> bool:
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


def int_constants(tree: ast.Module) -> dict[str, int]:
    """Module-level names assigned an int literal exactly once (``n_gpus = 2``)."""
    seen: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            seen.setdefault(node.id, []).append(node)
    out: dict[str, int] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value = stmt.targets[0].id, int_value(stmt.value, {})
            if value is not None and len(seen.get(target, [])) == 1:
                out[target] = value
    return out


def int_value(node: ast.AST | None, constants: dict[str, int]) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None
