"""Which global names a piece of module-level code needs from outside, with Python's scoping rules.

Nested scopes (functions, lambdas, classes, comprehensions) are resolved by :mod:`symtable`, the
compiler's own analysis, so comprehension scopes, parameters, ``global`` and class-body rules are
exactly Python's. The module scope itself is read in evaluation order (``x = x + 1`` needs ``x``;
``for i in ...: use(i)`` does not need ``i``), which symtable cannot tell.
"""

from __future__ import annotations

import ast
import builtins
import symtable
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

# Names IPython adds to builtins inside a kernel; a plain interpreter running the script lacks them.
IPYTHON_BUILTINS = frozenset({"get_ipython", "display", "__IPYTHON__", "dreload"})
# Names every module has; they are never taken from the notebook.
MODULE_DUNDERS = frozenset(
    {"__name__", "__file__", "__doc__", "__builtins__", "__spec__", "__loader__", "__package__"}
)
BUILTIN_NAMES = frozenset(dir(builtins)) - IPYTHON_BUILTINS


@dataclass
class NameUse:
    """What a piece of module-level code needs and provides.

    Attributes:
        free: names it reads before (or without) binding them, mapped to the first line that reads them.
        immediate: the free names read while the code runs (decorators, defaults, base classes, class
            bodies, plain statements), as opposed to inside function bodies, which run later.
        bound: names it binds at module level.
    """

    free: dict[str, int] = field(default_factory=dict)
    immediate: set[str] = field(default_factory=set)
    bound: set[str] = field(default_factory=set)


def analyze(source: str, tree: ast.Module | None = None) -> NameUse:
    """Find the global names ``source`` (valid module code) uses without defining them first.

    Builtins and module dunders are left out; IPython-only builtins (``get_ipython``...) are kept
    because the script will not have them.

    Args:
        source: module-level Python code.
        tree: ``ast.parse(source)`` if the caller already has it.

    Returns:
        The free, immediate and bound names.
    """
    tree = tree if tree is not None else ast.parse(source)
    order = _ModuleOrder(lazy_annotations=has_lazy_annotations(tree))
    for stmt in tree.body:
        order.visit(stmt)
    nested_refs, nested_binds = _nested_globals(symtable.symtable(source, "<cell>", "exec"))
    use = NameUse(bound=order.stored | nested_binds)
    first_lines = _first_load_lines(tree)
    for name, line in order.early_loads.items():
        if name in nested_binds:
            continue  # set by a function through `global`; assume the cell calls it first
        use.free[name] = line
        use.immediate.add(name)
    for name, in_class_body in nested_refs.items():
        if name not in use.bound and name not in use.free:
            use.free[name] = first_lines.get(name, 1)
        if in_class_body and name in use.free:
            use.immediate.add(name)
    for name in list(use.free):
        if name in BUILTIN_NAMES or name in MODULE_DUNDERS:
            del use.free[name]
            use.immediate.discard(name)
    return use


def has_lazy_annotations(tree: ast.Module) -> bool:
    """Whether the module starts with ``from __future__ import annotations`` (annotations not run)."""
    return any(
        isinstance(stmt, ast.ImportFrom)
        and stmt.module == "__future__"
        and any(alias.name == "annotations" for alias in stmt.names)
        for stmt in tree.body
    )


def bound_names(stmt: ast.stmt) -> set[str]:
    """The names one module-level statement binds in the module scope."""
    order = _ModuleOrder()
    order.visit(stmt)
    return order.stored


def _nested_globals(top: symtable.SymbolTable) -> tuple[dict[str, bool], set[str]]:
    """Global names read by nested scopes (name -> read from a class body run at definition time)
    and names nested scopes bind through ``global``."""
    refs: dict[str, bool] = {}
    binds: set[str] = set()

    def walk(table: symtable.SymbolTable, runs_now: bool) -> None:
        for sym in table.get_symbols():
            if sym.is_global() and sym.is_referenced():
                refs[sym.get_name()] = refs.get(sym.get_name(), False) or runs_now
            if sym.is_declared_global() and sym.is_assigned():
                binds.add(sym.get_name())
        for child in table.get_children():
            # A class body runs when the class statement runs; a function body runs when called.
            walk(child, runs_now and child.get_type() == "class")

    for child in top.get_children():
        walk(child, child.get_type() == "class")
    return refs, binds


def _first_load_lines(tree: ast.AST) -> dict[str, int]:
    lines: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
            lines[node.id] = min(lines.get(node.id, node.lineno), node.lineno)
    return lines


class _ModuleOrder(ast.NodeVisitor):
    """Walks module-scope code in evaluation order, recording names read before they are bound.

    It does not enter nested scopes except for the parts Python evaluates in the enclosing scope
    (decorators, defaults, annotations, base classes, a comprehension's first iterable).
    """

    def __init__(self, *, lazy_annotations: bool = False) -> None:
        self.lazy_annotations = lazy_annotations
        self.stored: set[str] = set()
        self.early_loads: dict[str, int] = {}

    def _load(self, name: str, line: int) -> None:
        if name not in self.stored and name not in self.early_loads:
            self.early_loads[name] = line

    def _store(self, name: str) -> None:
        self.stored.add(name)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self._store(node.id)
        else:  # Load, and Del (which needs the name to exist)
            self._load(node.id, node.lineno)

    def _visit_all(self, nodes: Iterable[ast.AST | None]) -> None:
        for node in nodes:
            if node is not None:
                self.visit(node)

    def _signature_parts(self, args: ast.arguments) -> Iterator[ast.expr | None]:
        yield from args.defaults
        yield from args.kw_defaults
        if self.lazy_annotations:
            return
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if arg is not None:
                yield arg.annotation

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._visit_all(node.decorator_list)
        self._visit_all(self._signature_parts(node.args))
        if not self.lazy_annotations:
            self._visit_all([node.returns])
        self._store(node.name)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_all(self._signature_parts(node.args))

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._visit_all(node.decorator_list)
        self._visit_all(node.bases)
        self._visit_all(kw.value for kw in node.keywords)
        self._store(node.name)

    def _visit_comprehension(
        self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp
    ) -> None:
        self.visit(node.generators[0].iter)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _visit_comprehension

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        self._visit_all(node.targets)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            self._load(node.target.id, node.lineno)
        self.visit(node.value)
        self.visit(node.target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._visit_all([node.value, None if self.lazy_annotations else node.annotation])
        # `x: int` alone annotates without binding.
        if node.value is not None or not isinstance(node.target, ast.Name):
            self.visit(node.target)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self.visit(node.target)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self.visit(node.target)
        self._visit_all([*node.body, *node.orelse])

    visit_AsyncFor = visit_For

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._store(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name != "*":
                self._store(alias.asname or alias.name)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        self._visit_all([node.type])
        if node.name:
            self._store(node.name)
        self._visit_all(node.body)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        self._visit_all([node.pattern])
        if node.name:
            self._store(node.name)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self._store(node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        self._visit_all([*node.keys, *node.patterns])
        if node.rest:
            self._store(node.rest)

    def visit_Global(self, node: ast.Global) -> None:
        """``global`` at module level changes nothing."""

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        """Not valid at module level; nothing to record."""
