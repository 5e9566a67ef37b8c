"""Where each name was last defined in the notebook's executed cells (IPython's ``In`` list).

History cells are already transformed by IPython: ``%time x = f()`` reads
``get_ipython().run_line_magic('time', 'x = f()')`` and ``!ls`` reads ``get_ipython().system('ls')``.
Statements that call ``get_ipython()`` are not reproduced; the names they assign are taken by value
from the namespace instead, except for the magics that just run Python in the namespace
(``%time``/``%%time``/``%%capture``), whose code is read like a cell of its own.
A cell that does not parse is skipped.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from .scopes import NameUse, analyze, bound_names
from .sourcetext import first_line, statement_lines

# Magics whose body runs as ordinary code in the user namespace.
_PYTHON_RUNNING_MAGICS = frozenset({"time", "capture"})


@dataclass
class Definition:
    """The latest statement in the history that binds a name.

    Attributes:
        name: the name bound.
        cell: 1-based index of the cell in the history (``In [cell]``).
        order: position of the statement in the whole history, for ordering the script.
        kind: ``import`` (reproduced as written), ``source`` (a def, class or ``name = lambda``,
            reproduced from its text) or ``value`` (anything else: taken from the live namespace).
        text: the import line, or the statement's source text; empty for values.
        node: the statement, so nested definitions (inside ``if``/``try``) can be found.
        origin: the source text ``node``'s line numbers refer to.
    """

    name: str
    cell: int
    order: int
    kind: Literal["import", "source", "value"]
    text: str = ""
    node: ast.stmt | None = None
    origin: str = ""
    _use: NameUse | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        """How messages name the cell."""
        return f"In [{self.cell}]"

    @property
    def use(self) -> NameUse:
        """The names the definition's text needs (computed on first use)."""
        if self._use is None:
            self._use = analyze(self.text) if self.text else NameUse()
        return self._use


@dataclass
class Statement:
    """One top-level statement of an earlier cell, for slicing the history (objects rebuilt by source).

    Attributes:
        cell: 1-based index of the cell (``In [cell]``).
        order: position in the whole history (the same counter as :attr:`Definition.order`).
        node: the statement.
        origin: the cell's source text (``node``'s line numbers refer to it).
        replay: the cell is marked ``# distrun: replay`` (its statements may be replayed whatever they do).
        magic: the statement runs a magic or shell command (never replayed).
    """

    cell: int
    order: int
    node: ast.stmt
    origin: str
    replay: bool = False
    magic: bool = False
    _bound: set[str] | None = field(default=None, repr=False)
    _use: NameUse | None = field(default=None, repr=False)

    @property
    def line(self) -> int:
        """The statement's first line in its cell, as JupyterLab shows it."""
        return first_line(self.node)

    @property
    def where(self) -> str:
        """How messages name it: ``In [3] line 2``."""
        return f"In [{self.cell}] line {self.line}"

    @property
    def text(self) -> str:
        """The statement's source: its whole lines, or just its own part of a line it shares
        (``a = 1; b = 2``)."""
        lines = statement_lines(self.origin, self.node)
        after = lines[-1][self.node.end_col_offset or len(lines[-1]) :].lstrip(" \t;")
        if self.node.col_offset > 0 or (after and not after.startswith("#")):
            return ast.get_source_segment(self.origin, self.node) or "\n".join(lines)
        return "\n".join(lines)  # whole lines: a trailing comment stays

    @property
    def bound(self) -> set[str]:
        """Names it binds at module level."""
        if self._bound is None:
            self._bound = bound_names(self.node)
        return self._bound

    @property
    def use(self) -> NameUse:
        """Names its text needs."""
        if self._use is None:
            self._use = analyze(self.text)
        return self._use


REPLAY_MARK = "# distrun: replay"


@dataclass
class HistoryIndex:
    """The latest definition of every name bound at the top level of the history.

    Attributes:
        defs: name -> latest definition.
        imports: name -> every import statement that bound it, in history order (``import torch``,
            ``import torch.nn`` both bind ``torch``; all are replayed so submodules are loaded).
    """

    defs: dict[str, Definition] = field(default_factory=dict)
    imports: dict[str, list[Definition]] = field(default_factory=dict)
    statements: list[Statement] = field(default_factory=list)
    _order: int = 0

    @classmethod
    def build(cls, history: Sequence[str]) -> HistoryIndex:
        """Index ``history`` (``In[1:]``, transformed cells in execution order)."""
        index = cls()
        for number, cell in enumerate(history, start=1):
            index._add_source(cell, number)
        return index

    def _add_source(self, source: str, cell: int) -> None:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return
        replay = any(line.strip() == REPLAY_MARK for line in source.splitlines())
        for stmt in tree.body:
            self._order += 1
            magic = _calls_ipython(stmt)
            if not (magic and _magic_python_body(stmt) is not None):  # %%time's body is indexed itself
                self.statements.append(Statement(cell, self._order, stmt, source, replay, magic))
            self._add_statement(source, stmt, cell, magic)

    def _add_statement(self, source: str, stmt: ast.stmt, cell: int, magic: bool) -> None:
        if magic:
            body = _magic_python_body(stmt)
            if body is not None:
                self._add_source(body, cell)
            else:
                self._bind_values(source, stmt, cell)
            return
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                if alias.name != "*":
                    self._bind_import(stmt, alias, cell)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self._set(Definition(stmt.name, cell, self._order, "source", _text(source, stmt), stmt))
        elif _is_lambda_assignment(stmt):
            assert isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name)
            name = stmt.targets[0].id
            self._set(Definition(name, cell, self._order, "source", _text(source, stmt), stmt))
        elif isinstance(stmt, ast.Delete):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    self.defs.pop(target.id, None)
                    self.imports.pop(target.id, None)
        else:
            self._bind_values(source, stmt, cell)

    def _set(self, definition: Definition) -> None:
        self.defs[definition.name] = definition
        if definition.kind != "import":
            self.imports.pop(definition.name, None)

    def _bind_values(self, source: str, stmt: ast.stmt, cell: int) -> None:
        for name in sorted(bound_names(stmt)):
            self._set(Definition(name, cell, self._order, "value", node=stmt, origin=source))

    def _bind_import(self, stmt: ast.Import | ast.ImportFrom, alias: ast.alias, cell: int) -> None:
        as_part = f" as {alias.asname}" if alias.asname else ""
        if isinstance(stmt, ast.Import):
            name = alias.asname or alias.name.split(".")[0]
            text = f"import {alias.name}{as_part}"
        else:
            name = alias.asname or alias.name
            text = f"from {'.' * stmt.level}{stmt.module or ''} import {alias.name}{as_part}"
        definition = Definition(name, cell, self._order, "import", text, stmt)
        # `import torch` and `import torch.nn` both bind `torch`: keep replaying all such plain imports so
        # submodules stay loaded; any other kind of import replaces what the name meant before.
        keep = []
        if _plain_import(text):
            # (the same line again replaces its earlier copy: a re-run import cell adds nothing)
            keep = [d for d in self.imports.get(name, []) if _plain_import(d.text) and d.text != text]
        self.imports[name] = [*keep, definition]
        self._set(definition)


def _plain_import(text: str) -> bool:
    return text.startswith("import ") and " as " not in text


def _text(source: str, stmt: ast.stmt) -> str:
    return "\n".join(statement_lines(source, stmt))


def _calls_ipython(stmt: ast.stmt) -> bool:
    return any(isinstance(node, ast.Name) and node.id == "get_ipython" for node in ast.walk(stmt))


def _is_lambda_assignment(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and isinstance(stmt.value, ast.Lambda)
        and first_line(stmt) == stmt.lineno
    )


def _magic_python_body(stmt: ast.stmt) -> str | None:
    """The Python code run by ``%time``/``%%time``/``%%capture`` (transformed form), else None."""
    if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
        return None
    call = stmt.value
    func = call.func
    if not (
        isinstance(func, ast.Attribute)
        and func.attr in ("run_cell_magic", "run_line_magic")
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "get_ipython"
    ):
        return None
    args = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in call.args]
    if not args or args[0] not in _PYTHON_RUNNING_MAGICS:
        return None
    if func.attr == "run_line_magic" and len(args) == 2 and args[0] == "time":
        return args[1]
    if func.attr == "run_cell_magic" and len(args) == 3:
        return args[2]
    return None
