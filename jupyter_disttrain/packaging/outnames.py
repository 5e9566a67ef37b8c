"""``--out`` checked against the script before anything runs: names it never assigns, and values
that surely cannot come back (a function, a class, a module, a generator, an open file).

Read from the script's module level (where the rank wrapper finds the values when the body has
ended), bodies of ``if``/``for``/``while``/``with``/``try`` included, and from ``global``
statements in functions. A name refused here names itself and why, in one line; a name whose
value can only be judged at run time is left to the rank (``runtime/outvalues.py``).
"""

from __future__ import annotations

import ast

from ..model.errors import InvalidSpecError

# What an assignment's value surely is, by the shape of its expression.
_FUNCTION, _CLASS, _MODULE = "a function", "a class", "a module"
_GENERATOR, _FILE = "a generator", "an open file"
_CANNOT = (_FUNCTION, _CLASS, _MODULE, _GENERATOR, _FILE)


def assigned(source: str) -> dict[str, set[str]]:
    """Each name the script's module level binds, and what each binding surely is (``value``
    where the expression does not tell)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    found: dict[str, set[str]] = {}
    for node in _module_level(tree.body):
        for name, kind in _bindings(node):
            found.setdefault(name, set()).add(kind)
    for inner in ast.walk(tree):
        if isinstance(inner, ast.NamedExpr):
            found.setdefault(inner.target.id, set()).add(_kind(inner.value))
        elif isinstance(inner, ast.Global):
            for name in inner.names:
                found.setdefault(name, set()).add("value")
    return found


def _bindings(node: ast.stmt) -> list[tuple[str, str]]:
    """(name, what it surely is) of each name one module-level statement binds."""
    if isinstance(node, ast.Assign):
        return [b for target in node.targets for b in _names(target, _kind(node.value))]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
        return _names(node.target, _kind(node.value))
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return _names(node.target, "value")
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [
            b
            for item in node.items
            if item.optional_vars is not None
            for b in _names(item.optional_vars, _FILE if _is_open(item.context_expr) else "value")
        ]
    if isinstance(node, ast.Import):
        return [(alias.asname or alias.name.split(".")[0], _MODULE) for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        return [(alias.asname or alias.name, "value") for alias in node.names]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [(node.name, _FUNCTION)]
    if isinstance(node, ast.ClassDef):
        return [(node.name, _CLASS)]
    return []


def _names(target: ast.AST, kind: str) -> list[tuple[str, str]]:
    return [(n.id, kind) for n in ast.walk(target) if isinstance(n, ast.Name)]


def _module_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements that run in the module's scope: nested blocks, not function bodies."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        for name in ("body", "orelse", "finalbody"):
            inner = getattr(node, name, None)
            if isinstance(inner, list) and not isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            ):
                out += _module_level(inner)
        for handler in getattr(node, "handlers", []):
            out += _module_level(handler.body)
        for case in getattr(node, "cases", []):
            out += _module_level(case.body)
    return out


def _kind(value: ast.expr) -> str:
    if isinstance(value, ast.Lambda):
        return _FUNCTION
    if isinstance(value, ast.GeneratorExp):
        return _GENERATOR
    if _is_open(value):
        return _FILE
    return "value"


def _is_open(value: ast.expr) -> bool:
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "open"


def check_out(source: str, out: list[str], out_all: list[str]) -> None:
    """Refuse, in one line, an ``--out``/``--out-all`` name the script never assigns or whose
    every assignment is something that cannot come back."""
    bound = assigned(source)
    for flag, names in (("--out", out), ("--out-all", out_all)):
        for name in names:
            kinds = bound.get(name)
            if not kinds:
                raise InvalidSpecError(
                    f"{flag} {name}: the cell never assigns {name}; name a variable it sets"
                )
            if kinds <= set(_CANNOT):
                what = " or ".join(sorted(kinds))
                raise InvalidSpecError(
                    f"{flag} {name}: {name} is {what}, which cannot come back into the kernel (modules, "
                    "optimizers, tensors, arrays and plain data can)"
                )
