"""The checks made before launch on everything that goes into the script.

:func:`check_script` runs the DDP pitfall checks over the cell and the code taken from earlier cells,
and refuses a cell that surely reads a name defined nowhere (it would stop with NameError).

"Surely" is kept sound, since a false refusal is worse than a NameError at run time: only names the
cell reads while it runs (at its top level, or in one of its own functions that it calls there), not
in a ``try`` that catches NameError, and not in a cell that can bind names in ways the text does not
show (``from x import *``, ``exec``, ``globals()``...). Other names found nowhere get a warning.
"""

from __future__ import annotations

import ast
import symtable
from collections.abc import Collection, Iterator, Mapping, Sequence

from ..model.errors import PackagingError
from .history import HistoryIndex
from .pitfalls import Block, Pitfall, Target, check_blocks, silenced_codes
from .resolve import Item
from .sourcetext import first_line, statement_lines

UNDEFINED = "undefined-name"
# Calls that bind or look up names at run time where the text does not show it.
_DYNAMIC = frozenset(
    {"exec", "eval", "globals", "vars", "locals", "__import__", "setattr", "execfile", "__builtins__"}
)
# Attributes that reach a namespace as a dict (``sys.modules[__name__].__dict__["x"] = 1``).
_DYNAMIC_ATTRIBUTES = frozenset({"__dict__", "modules", "__builtins__"})
_CATCHES_NAME_ERROR = frozenset({"NameError", "Exception", "BaseException"})


def check_script(
    blocks: Sequence[Block],
    missing: Mapping[str, int],
    ignore: Collection[str] = (),
    target: Target | None = None,
) -> list[Pitfall]:
    """Pitfall warnings on the script, plus a warning for each name found nowhere.

    Args:
        blocks: the script's code in script order; the last one is the ``%%distrun`` cell.
        missing: names the cell uses that are in no cell, not in the kernel and not builtins
            (name -> line in the cell's own text).
        ignore: codes not to report (``"*"``: none).
        target: what the job runs on.

    Raises:
        PackagingError: the cell surely reads a name that is defined nowhere.
    """
    cell = blocks[-1]
    offset = cell.first_line - 1
    silenced = silenced_codes(cell.source)
    off = {UNDEFINED, "*"} & set(ignore)
    found = check_blocks(blocks, ignore, target=target)
    if missing and not off:
        sure = surely_read(cell.source, missing)
        for name, line in sorted(missing.items(), key=lambda m: m[1]):
            if UNDEFINED in silenced.get(sure.get(name, line), set()) | silenced.get(line, set()):
                continue
            if name in sure:
                raise PackagingError(
                    f"line {sure[name] + offset} of the cell uses `{name}`, which is not defined in this"
                    " cell, in earlier cells or in the kernel, so the job would stop with NameError:"
                    " define or import it (if it is made at run time, add"
                    " `# distrun: ignore[undefined-name]` to that line or --no-check undefined-name)"
                )
            found.append(
                Pitfall(
                    UNDEFINED,
                    line + offset,
                    f"`{name}` is not defined in this cell, in earlier cells or in the kernel: the job would"
                    " stop with NameError if this line runs; define or import it",
                )
            )
    # Earlier cells keep check_blocks' order (script order); the cell's own warnings by line.
    return sorted(found, key=lambda p: (1, p.line, p.code) if not p.cell else (0, 0, ""))


def script_blocks(cell: str, cell_line: int, items: Sequence[Item], index: HistoryIndex) -> list[Block]:
    """The code of the script as blocks: the definitions copied from earlier cells (with the cell and
    line they come from) in script order, then the ``%%distrun`` cell, whose first line is
    ``cell_line`` in JupyterLab (2: the magic line is line 1)."""
    blocks = []
    for item in items:
        if item.section == "import":  # what the script imports: no warning of its own, but the
            blocks.append(Block("\n".join(item.lines), item.label))  # checks of libraries read it
            continue
        if item.replayed:  # statements replayed from earlier cells: each with its own cell and line
            blocks += [Block(s.text, f"In [{s.cell}]", s.line) for s in item.replayed]
            continue
        definition = index.defs.get(item.name)
        if item.section != "code" or definition is None or item.label != definition.label:
            continue
        if definition.node is None or not item.lines:
            continue
        if definition.text:
            origin = definition.text.splitlines()
        else:  # a def nested in an `if`/`try`: the statement around it, from its cell
            origin = statement_lines(definition.origin, definition.node)
        head = item.lines[0].strip()
        at = next((i for i, text in enumerate(origin) if text.strip() == head), None)
        if at is not None:  # None: generated text (a value, an alias), not the user's code
            blocks.append(Block("\n".join(item.lines), item.label, first_line(definition.node) + at))
    return [*blocks, Block(cell, "", cell_line)]


def surely_read(source: str, names: Collection[str]) -> dict[str, int]:
    """Which of ``names`` the cell ``source`` surely reads when it runs (name -> first such line)."""
    tree = ast.parse(source)
    if _binds_unseen(tree):
        return {}
    reads = _Reads(set(names))
    for stmt in tree.body:
        reads.visit(stmt)
    # The cell's own functions that it calls while it runs: the globals their bodies read.
    functions = {s.name: s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    tables = {t.get_name(): t for t in symtable.symtable(source, "<cell>", "exec").get_children()}
    for name in sorted(reads.called & functions.keys()):
        table = tables.get(name)
        if table is None or table.get_type() != "function":
            continue
        body_globals = {s.get_name() for s in table.get_symbols() if s.is_global() and s.is_referenced()}
        inner = _Reads(set(names) & body_globals)
        for stmt in functions[name].body:
            inner.visit(stmt)
        for found, line in inner.lines.items():
            reads.lines.setdefault(found, line)
    return reads.lines


def _binds_unseen(tree: ast.Module) -> bool:
    """``from x import *``, ``exec(...)``, ``globals()``, ``import builtins``, ``sys.modules``,
    ``.__dict__``...: names can appear that the text does not bind."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return True
        if isinstance(node, ast.Import) and any(a.name == "builtins" for a in node.names):
            return True
        if isinstance(node, ast.Name) and node.id in _DYNAMIC:
            return True
        if isinstance(node, ast.Attribute) and node.attr in _DYNAMIC_ATTRIBUTES:
            return True
    return False


class _Reads(ast.NodeVisitor):
    """Names read by code as it runs now, not inside function bodies or handlers of NameError."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.lines: dict[str, int] = {}
        self.called: set[str] = set()

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Store) and node.id in self.names:
            self.lines.setdefault(node.id, node.lineno)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name):
            self.called.add(node.func.id)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for part in _definition_time(node):
            self.visit(part)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for part in [*node.args.defaults, *node.args.kw_defaults]:
            if part is not None:
                self.visit(part)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        # Class bodies run now, but their names shadow; only the parts evaluated outside count.
        for part in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(part)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp) -> None:
        self.visit(node.generators[0].iter)  # the rest runs in the comprehension's own scope

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_Try(self, node: ast.Try) -> None:
        if not any(_catches_name_error(h) for h in node.handlers):
            for stmt in node.body:
                self.visit(stmt)
        for stmt in [*node.orelse, *node.finalbody]:
            self.visit(stmt)

    visit_TryStar = visit_Try


def _definition_time(node: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """What Python evaluates when the ``def`` runs: decorators and defaults (annotations may be lazy)."""
    yield from node.decorator_list
    yield from node.args.defaults
    yield from (d for d in node.args.kw_defaults if d is not None)


def _catches_name_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(k, (ast.Name, ast.Attribute)) and _last(k) in _CATCHES_NAME_ERROR for k in kinds)


def _last(node: ast.Name | ast.Attribute) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr
