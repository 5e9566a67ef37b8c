"""Which keys of a hyper-parameter dict (or namespace) a script reads.

A notebook's ``config`` may hold far more than the cell uses, credentials among them; the job
records only what its script reads: ``config["lr"]``, ``config.get("epochs", 3)``, ``args.lr``,
``cfg["opt"]["lr"]`` (``opt.lr``), in the cell, in the functions it calls and in the statements
replayed for it (all of which are in the script). Handed to a notebook function, the object is
followed into that function's body; handed anywhere else, iterated, or read with a key that is
not a constant, every key (under what was read so far) counts as read.
"""

from __future__ import annotations

import ast

# Mapping methods that read the key given as their first argument.
_KEYED = frozenset({"get", "pop", "setdefault", "__getitem__"})
# Mapping methods that read every key.
_WHOLE = frozenset({"keys", "values", "items", "copy", "update", "to_dict", "to_container", "_asdict"})
_DEPTH = 3  # key paths as deep as hparams.flatten names them (outer.inner.leaf)
EVERY_KEY = ""  # the path read when the object is used whole


def key_reads(tree: ast.Module, name: str) -> set[str]:
    """Dotted key paths of global ``name`` that ``tree`` reads; ``EVERY_KEY`` among them when it
    may read any key."""
    return _Reads(tree).of(name, tree, set())


def is_read(key: str, reads: set[str]) -> bool:
    """Whether the flattened hyper-parameter ``key`` is among ``reads`` (a path above it was read
    whole, or one below it, which ``flatten`` shows as text)."""
    return any(r in (EVERY_KEY, key) or key.startswith(r + ".") or r.startswith(key + ".") for r in reads)


class _Reads:
    def __init__(self, tree: ast.Module) -> None:
        self.parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        self.functions = {
            n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }

    def of(self, name: str, scope: ast.AST, seen: set[tuple[str, str]]) -> set[str]:
        reads: set[str] = set()
        for node in ast.walk(scope):
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                reads |= self._path(node, seen)
        return reads

    def _path(self, node: ast.expr, seen: set[tuple[str, str]]) -> set[str]:
        """The key paths read where ``node`` (the object) is used."""
        path: list[str] = []
        current: ast.AST = node
        while len(path) < _DEPTH:
            parent = self.parents.get(current)
            if isinstance(parent, ast.Subscript) and parent.value is current:
                key = _constant(parent.slice)
                if key is None:
                    break
                path.append(key)
            elif isinstance(parent, ast.Attribute) and parent.value is current:
                if parent.attr in _WHOLE or (parent.attr.startswith("__") and parent.attr != "__getitem__"):
                    break
                call = self.parents.get(parent)
                if parent.attr in _KEYED and isinstance(call, ast.Call) and call.func is parent:
                    key = _constant(call.args[0]) if call.args else None
                    if key is None:
                        break
                    path.append(key)
                    parent = call
                else:
                    path.append(parent.attr)
            elif isinstance(parent, ast.Call) and parent.func is not current:
                return self._passed(parent, current, ".".join(path), seen)
            elif isinstance(parent, ast.keyword) and isinstance(call := self.parents.get(parent), ast.Call):
                return self._passed(call, current, ".".join(path), seen)
            else:
                break
            current = parent
        return {".".join(path)}

    def _passed(self, call: ast.Call, arg: ast.AST, prefix: str, seen: set[tuple[str, str]]) -> set[str]:
        """What a notebook function reads of the object passed to it as ``arg``; everything
        (under ``prefix``) when the callee is not a notebook function or the call hides which
        parameter gets it."""
        func = self.functions.get(call.func.id) if isinstance(call.func, ast.Name) else None
        param = _parameter(func, call, arg) if func is not None else None
        if func is None or param is None:
            return {prefix}
        if (func.name, param) in seen:
            return set()
        seen.add((func.name, param))
        inner = self.of(param, func, seen)
        return {".".join(p for p in (prefix, r) if p) for r in inner}


def _parameter(func: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call, arg: ast.AST) -> str | None:
    """The parameter of ``func`` that ``arg`` of ``call`` binds; None when not plain."""
    positional = [a.arg for a in [*func.args.posonlyargs, *func.args.args]]
    if arg in call.args:
        i = call.args.index(arg)
        return (
            positional[i]
            if i < len(positional) and not any(isinstance(a, ast.Starred) for a in call.args[:i])
            else None
        )
    keyword = next((k for k in call.keywords if k.value is arg), None)
    names = {a.arg for a in [*func.args.args, *func.args.kwonlyargs]}
    return keyword.arg if keyword is not None and keyword.arg in names else None


def _constant(node: ast.AST) -> str | None:
    value = node.value if isinstance(node, ast.Constant) else None
    return str(value) if isinstance(value, str | int) and not isinstance(value, bool) else None
