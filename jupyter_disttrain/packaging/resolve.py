"""Deciding, name by name, what the script must contain for the cell to run: the resolver.

A name the cell needs is looked up in the history (latest definition wins) and then in the live
namespace. Imports are replayed as written, functions and classes are copied from their cell text
(and what *they* need is resolved in turn), plain values are sent by value, and other objects are
rebuilt by the statements that made them: so is a dataclass instance whose fields are not all
plain (``DataCollatorWithPadding(tokenizer=tokenizer)``), and a value that holds a path of the
kernel's own (``em.checkpoint_dir()`` run in the kernel), which the job must make its own.
"""

from __future__ import annotations

import ast
import dataclasses
import sys
import types
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..model.errors import PackagingError
from .history import Definition, HistoryIndex, Statement
from .replay import Slicer
from .scopes import IPYTHON_BUILTINS, NameUse, analyze
from .sourcetext import first_line, shift, statement_lines, string_interior_lines
from .values import TENSOR_FILE, Unsendable, ValueWriter, is_resource

Section = Literal["import", "value", "code"]
MAIN_GUARD = 'if __name__ == "__main__":'


@dataclass
class Item:
    """One piece of the script that binds a captured name.

    Attributes:
        name: the captured name.
        section: ``import`` lines come first, then ``value`` assignments, then ``code`` (definitions).
        order: position in the history (namespace-only names sort last).
        lines: the source lines.
        label: the cell it came from ("In [3]"), or "" when it only exists in the namespace.
        needs_now: captured names that must be bound before this item runs (base classes, decorators...).
        replayed: for an object rebuilt by source, the earlier cells' statements that rebuild it.
        state: names whose trained state (``state_dict``) is loaded after the replay.
    """

    name: str
    section: Section
    order: int
    lines: list[str]
    label: str = ""
    needs_now: set[str] = field(default_factory=set)
    replayed: list[Statement] = field(default_factory=list)
    state: list[str] = field(default_factory=list)

    @property
    def config(self) -> bool:
        """A process-configuration statement (a seed, ``logging.basicConfig``...), not a name."""
        return self.name.startswith("<")


@dataclass
class Resolver:
    """Collects the items for every name the cell needs, following dependencies transitively.

    Attributes:
        index: the history's definitions.
        user_ns: the kernel namespace.
        cell_binds: names the cell binds itself; functions that read them get them from the cell.
        writer: renders values.
        items: name -> item, filled by :meth:`require`.
        missing: names found nowhere (name -> first line in the cell), for a warning.
        cell_line: the line JupyterLab shows for the cell's first line.
        left_out: statements of earlier cells not in the script, for the dry run (order -> why).
        kernel_dirs: the kernel's own directories (em's outside a job): a value holding a path
            under one is rebuilt in the job when it can be, else sent with a warning.
        kernel_paths: names sent by value that hold such a path (name -> its definition).
    """

    index: HistoryIndex
    user_ns: Mapping[str, Any]
    cell_binds: Collection[str]
    writer: ValueWriter
    items: dict[str, Item] = field(default_factory=dict)
    missing: dict[str, int] = field(default_factory=dict)
    cell_line: int = 1
    left_out: dict[int, str] = field(default_factory=dict)
    kernel_dirs: tuple[str, ...] = ()
    kernel_paths: dict[str, Definition | None] = field(default_factory=dict)
    # (name, who needs it, cell line): a work list, since dependency chains can be longer than the stack.
    _pending: list[tuple[str, str, int]] = field(default_factory=list)
    _slicer: Slicer | None = None

    def require_cell_names(self, use: NameUse) -> None:
        """Resolve every free name of the cell, and what those need in turn."""
        for name, line in use.free.items():
            if name in IPYTHON_BUILTINS and name != "display":
                raise PackagingError(
                    f"line {line + self.cell_line - 1} of the cell uses `{name}`, which exists only in"
                    " IPython: write plain Python (subprocess or os instead of magics and ! commands)"
                )
        self._pending = [(name, "", line) for name, line in reversed(use.free.items())]
        self._add_config()
        while self._pending:
            name, user, line = self._pending.pop()
            self._resolve(name, user=user, line=line)
        for item in {id(i): i for i in self.items.values()}.values():
            if item.replayed:
                item.lines = self._replay_lines(item)

    @property
    def slicer(self) -> Slicer:
        if self._slicer is None:
            self._slicer = Slicer(self.index, self.user_ns, _stateful)
        return self._slicer

    def _add_config(self) -> None:
        """Seeds, logging and warning settings of earlier cells run in the job too, in order."""
        for stmt, why in self.slicer.config_statements():
            if why is not None:
                self.left_out[stmt.order] = why
                continue
            key = f"<{stmt.where}>"
            free = set(stmt.use.free)
            self.items[key] = Item(key, "code", stmt.order, [], f"In [{stmt.cell}]", free, [stmt])
            for dep in sorted(free):
                self._require(dep, user=f"`{stmt.text.strip()[:40]}` ({stmt.where})")

    def _replay(self, name: str, value: Any) -> bool:
        """Rebuild ``name`` by replaying the statements that built it; False when none do."""
        found = self.slicer.slice(name)
        if found is None or not found.statements:
            return False
        for order, why in found.left_out.items():
            self.left_out[order] = f"{self.left_out[order]}; {why}" if order in self.left_out else why
        orders = {s.order for s in found.statements}
        # Slices that share a statement (`model, opt = prepare(model, opt)`) become one block.
        merged = next((i for i in self.items.values() if orders & {s.order for s in i.replayed}), None)
        item = merged or Item(name, "code", found.statements[0].order, [], "")
        known = {s.order: s for s in [*item.replayed, *found.statements]}
        item.replayed = [known[k] for k in sorted(known)]
        item.order = item.replayed[0].order
        item.label = ", ".join(dict.fromkeys(f"In [{s.cell}]" for s in item.replayed))
        if found.trained and _stateful(value):
            key = f"{name}.state_dict()"
            self.writer.tensors[key] = value.state_dict()
            item.state.append(name)
        binds = found.binds | {name}
        for bound in binds:
            self.items[bound] = item
        needs = set().union(*(s.use.free for s in found.statements)) - binds
        item.needs_now |= needs
        for dep in sorted(needs):
            self._require(dep, user=f"`{name}` (rebuilt from {item.label})")
        return True

    def _replay_lines(self, item: Item) -> list[str]:
        """The replayed statements, each under a comment naming its cell and line. Objects are rebuilt
        under the main guard (DataLoader workers started with spawn re-import the script; they must
        not rebuild a model or a dataset); configuration stays at module level, for workers too."""
        indent = "" if item.config else "    "
        lines: list[str] = [] if item.config else [MAIN_GUARD]
        for stmt in item.replayed:
            keep = string_interior_lines(ast.parse(stmt.origin))
            text = stmt.text.splitlines()
            lines += [f"{indent}# {stmt.where}", *shift(text, stmt.line, keep, indent=indent)]
        for name in item.state:
            key = f"{name}.state_dict()"
            lines += [
                f"{indent}# `{name}` was trained in the kernel: its state comes from {TENSOR_FILE}",
                f"{indent}{name}.load_state_dict(_CAPTURED_TENSORS[{key!r}])",
            ]
        return lines

    def _require(self, name: str, *, user: str) -> None:
        self._pending.append((name, user, 0))

    def _resolve(self, name: str, *, user: str, line: int) -> None:
        """Resolve ``name``; ``user`` describes the captured definition that needs it ("" for the cell)."""
        if name in self.items:
            return
        if name == "display" and name not in self.user_ns and name not in self.index.defs:
            self.items[name] = Item(name, "import", sys.maxsize, ["from IPython.display import display"])
            return
        definition = self.index.defs.get(name)
        if definition is not None and definition.kind == "import":
            lines = [d.text for d in self.index.imports.get(name, [definition])]
            self.items[name] = Item(name, "import", definition.order, lines, definition.label)
        elif definition is not None and definition.kind == "source":
            self._add_source(name, definition, definition.text.splitlines(), definition.use)
        elif name in self.user_ns:
            self._add_from_value(name, self.user_ns[name], definition, user)
        elif not user:
            self.missing[name] = line

    def _add_source(self, name: str, definition: Definition, lines: list[str], use: NameUse) -> None:
        item = Item(name, "code", definition.order, lines, definition.label)
        self.items[name] = item
        user = f"`{name}` ({definition.label})"
        for dep in use.free:
            if dep in IPYTHON_BUILTINS and dep != "display":
                raise PackagingError(
                    f"cannot send `{name}` (defined in {definition.label}) to the job: it uses `{dep}`, which"
                    " exists only in IPython; rewrite it in plain Python or define it inside the cell"
                )
            if dep == name:
                continue
            if dep in use.immediate:
                item.needs_now.add(dep)
            elif dep in self.cell_binds:
                continue  # the cell binds it before calling the function
            self._require(dep, user=user)

    def _add_from_value(self, name: str, value: Any, definition: Definition | None, user: str) -> None:
        where = f"defined in {definition.label}" if definition else "not defined in any cell"
        if user:
            where += f", used by {user}"
        try:
            if not self._add_reference(name, value, definition):
                self.writer.class_name = self._class_name
                rendered = self.writer.render(name, value)
                if self._holds_kernel_path(rendered):
                    # em.checkpoint_dir() run in the kernel: the job runs it again, for its own
                    # (when its statements may run again; else the value as it is, with a warning).
                    if self._replayable(definition) and self._replay_if_allowed(name, value):
                        return
                    self.kernel_paths[name] = definition
                label = definition.label if definition else ""
                order = definition.order if definition else sys.maxsize
                classes = set(self.writer.last_classes)
                # A value built from a notebook class (Config(lr=...)) has to follow that class's definition.
                section: Section = "code" if classes else "value"
                self.items[name] = Item(name, section, order, [f"{name} = {rendered}"], label, classes)
                for cls in classes:
                    self._require(cls, user=f"`{name}`")
        except Unsendable as problem:
            # An object (not data, not a live resource) is rebuilt by the statements that made it;
            # so is a dataclass instance with a field that is such an object.
            dataclass_object = dataclasses.is_dataclass(value) and not isinstance(value, type)
            whole = (not problem.path or dataclass_object) and not problem.data and not is_resource(value)
            if whole and self._replayable(definition) and self._replay(name, value):
                return
            if problem.path:
                raise PackagingError(
                    f"cannot send `{name}` ({where}) to the job: `{name}{problem.path}` is {problem.what};"
                    f" {problem.advice}"
                ) from None
            raise PackagingError(
                f"cannot send `{name}` ({problem.what}, {where}) to the job: {problem.advice}"
            ) from None

    def _replay_if_allowed(self, name: str, value: Any) -> bool:
        """``_replay``, False where a statement may not run again (a file write...): a value that
        can be sent as it is then is."""
        try:
            return self._replay(name, value)
        except PackagingError:
            return False

    @staticmethod
    def _replayable(definition: Definition | None) -> bool:
        return definition is not None and definition.kind == "value"

    def _holds_kernel_path(self, rendered: str) -> bool:
        return any(f"{d}{sep}" in rendered for d in self.kernel_dirs for sep in ("/", "'", '"'))

    def _class_name(self, cls: type) -> str | None:
        """The script's name for ``cls``: a class from a cell (copied) or from a loaded module (imported)."""
        name = cls.__name__
        if name in self.cell_binds or self.user_ns.get(name, cls) is not cls:
            return None  # the name means something else
        if cls.__module__ == "__main__":
            definition = self.index.defs.get(name)
            return name if definition is not None and definition.kind == "source" else None
        if _lookup(cls.__module__, cls.__qualname__) is not cls:
            return None
        if name not in self.items and name not in self.user_ns:
            self.items[name] = Item(name, "import", sys.maxsize, [f"from {cls.__module__} import {name}"])
        return name

    def _add_reference(self, name: str, value: Any, definition: Definition | None) -> bool:
        """Bind ``name`` to a module, function or class by reference; False for plain values.

        Raises:
            Unsendable: a function or class that cannot be reproduced.
        """
        order = definition.order if definition else sys.maxsize
        label = definition.label if definition else ""
        if isinstance(value, types.ModuleType):
            self.items[name] = Item(name, "import", order, [_import_module(name, value)], label)
            return True
        module = getattr(value, "__module__", None) or ""
        qualname = getattr(value, "__qualname__", "")
        if not isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)):
            # Other named library objects (numpy ufuncs...) are imported when their name leads back to them.
            found = isinstance(module, str) and isinstance(qualname, str) and module != "__main__"
            if not (found and qualname and _lookup(module, qualname) is value):
                return False
        if module != "__main__":
            self.items[name] = Item(
                name, "import", order, [_import_from(name, value, module, qualname)], label
            )
            return True
        self._add_notebook_definition(name, value, definition, order, label)
        return True

    def _add_notebook_definition(
        self, name: str, value: Any, definition: Definition | None, order: int, label: str
    ) -> None:
        """Bind ``name`` to a function or class defined in a cell: by its source, or as an alias
        of a name bound to it (``g = f``).

        Raises:
            Unsendable: a closure, a lambda, or a definition whose source is not in any cell.
        """
        if getattr(value, "__closure__", None):
            raise Unsendable("a closure over live state", "define it with def at the top level of a cell")
        if value.__name__ == "<lambda>":
            raise Unsendable("a lambda", "define it with def in a cell or inside the %%distrun cell")
        original = value.__name__
        if original != name and original in self.index.defs and self.user_ns.get(original) is value:
            # `g = f`: copy `f` and alias it.
            self.items[name] = Item(name, "code", order, [f"{name} = {original}"], label, {original})
            self._require(original, user=f"`{name}`")
            return
        nested = None
        if definition is not None and original == name:
            nested = _nested_definition(definition.node, name, getattr(value, "__code__", None))
        if definition is None or nested is None:
            raise Unsendable(
                f"{_kind(value)} whose source is not in any cell",
                "define it in a cell with def/class, or inside the %%distrun cell",
            )
        tree = ast.parse(definition.origin)
        lines = statement_lines(definition.origin, nested)
        lines = shift(lines, first_line(nested), string_interior_lines(tree), dedent=nested.col_offset)
        self._add_source(name, definition, lines, analyze("\n".join(lines)))


def _stateful(value: Any) -> bool:
    """Whether a value's state can be carried by value: a module, an optimizer, a scheduler."""
    return callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None))


def _lookup(module: str, qualname: str) -> Any:
    """``module.qualname`` if that module is loaded (nothing is imported here), else None."""
    if "." in qualname or "<" in qualname:
        return None
    return getattr(sys.modules.get(module), qualname, None)


def _import_module(name: str, value: types.ModuleType) -> str:
    """``import module [as name]``, or raise when the module has no importable name."""
    module = value.__name__
    if module == "__main__" or getattr(value, "__spec__", None) is None:
        raise Unsendable("a module with no importable name", "import it inside the cell")
    return f"import {module}" if name == module else f"import {module} as {name}"


def _import_from(name: str, value: Any, module: str, qualname: str) -> str:
    """``from module import qualname [as name]``, or raise when that does not lead back to ``value``."""
    if _lookup(module, qualname) is not value:
        raise Unsendable(
            f"{_kind(value)} that cannot be imported by name", "define or import it inside the cell"
        )
    as_part = "" if qualname == name else f" as {name}"
    return f"from {module} import {qualname}{as_part}"


def _kind(value: Any) -> str:
    return "a class" if isinstance(value, type) else "a function"


def _nested_definition(stmt: ast.stmt | None, name: str, code: types.CodeType | None) -> ast.stmt | None:
    """The def/class named ``name`` inside compound statement ``stmt`` (not inside another def).

    When several branches define it, a function's code object tells by its first line which one ran;
    for a class, the last one in the text is taken.
    """
    if stmt is None:
        return None
    found: list[ast.stmt] = []
    pending: list[ast.AST] = [stmt]
    while pending:
        node = pending.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                found.append(node)
            continue
        pending.extend(
            child
            for child in ast.iter_child_nodes(node)
            if isinstance(child, (ast.stmt, ast.ExceptHandler, ast.match_case))
        )
    if code is not None:
        return next((n for n in found if first_line(n) == code.co_firstlineno), None)
    return max(found, key=lambda n: n.lineno, default=None)
