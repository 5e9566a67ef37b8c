"""``--out`` checked against the script before anything runs: names it never assigns, and values
that surely cannot come back (a function, a class, a module, a generator, an open file).

Read from the script's module level (where the rank wrapper finds the values when the body has
ended), bodies of ``if``/``for``/``while``/``with``/``try`` included, and from ``global``
statements in functions. A name refused here names itself and why, in one line; a name whose
value can only be judged at run time is left to the rank (``runtime/outvalues.py``).
"""

from __future__ import annotations

import ast

from ..errors import InvalidSpecError

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

    def bind(target: ast.AST, kind: str) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                found.setdefault(node.id, set()).add(kind)

    for node in _module_level(tree.body):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                bind(target, _kind(node.value))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            bind(node.target, _kind(node.value))
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            bind(node.target, "value")
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    bind(item.optional_vars, _FILE if _is_open(item.context_expr) else "value")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                found.setdefault(name, set()).add(_MODULE if isinstance(node, ast.Import) else "value")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.setdefault(node.name, set()).add(_FUNCTION)
        elif isinstance(node, ast.ClassDef):
            found.setdefault(node.name, set()).add(_CLASS)
    for inner in ast.walk(tree):
        if isinstance(inner, ast.NamedExpr):
            bind(inner.target, _kind(inner.value))
        elif isinstance(inner, ast.Global):
            for name in inner.names:
                found.setdefault(name, set()).add("value")
    return found


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
