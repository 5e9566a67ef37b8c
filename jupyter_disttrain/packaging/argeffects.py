"""Whether a notebook function changes an object passed to it, as far as its body shows.

``test(model, loader)`` in an earlier cell only reads ``model``: replaying it on every rank at job
start would run a whole evaluation for nothing. The body tells: an attribute or item assigned on
the parameter, a method called on it that is not a known read, the parameter handed to a function
that may change it (another notebook function is looked into in turn). Where the body cannot tell
(the object reaches ``*args``, or is aliased), the call counts as a change, as any call did before.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection, Iterable, Iterator

# Switching a module between training and evaluation mode: what an evaluation function does to
# its model and undoes; not a change a job needs replayed (its cell sets the mode it trains in).
MODE_METHODS = frozenset({"eval", "train"})
_DEPTH = 8  # notebook functions followed through one another


def changes_argument(
    func: ast.FunctionDef | ast.AsyncFunctionDef,
    call: ast.Call,
    name: str,
    *,
    reads: Collection[str],
    read_functions: Collection[str],
    lookup: Callable[[str], ast.FunctionDef | ast.AsyncFunctionDef | None],
    depth: int = 0,
) -> bool:
    """Whether ``call`` of ``func`` may change ``name`` (passed to it, or read by it as a global).

    ``reads``: methods that only read their object; ``read_functions``: functions that only read
    their arguments (by their last dotted part); ``lookup``: a notebook function's definition.
    """
    params = _receiving(func, call, name)
    if params is None or depth > _DEPTH:
        return True
    body = _Body(func, reads, read_functions, lookup, depth)
    return any(body.changes(p) for p in params)


def _receiving(func: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call, name: str) -> set[str] | None:
    """The parameters of ``func`` that ``name`` (or a part of it) reaches in ``call``, plus ``name``
    itself (a global the body may use); None when the call does not show which (``*args``)."""
    positional = [a.arg for a in [*func.args.posonlyargs, *func.args.args]]
    named = {a.arg for a in [*func.args.args, *func.args.kwonlyargs]}
    params = {name}
    for i, arg in enumerate(call.args):
        if root(arg, through_calls=False) != name:
            continue
        if any(isinstance(a, ast.Starred) for a in call.args[: i + 1]) or i >= len(positional):
            return None  # `f(*xs, model)`: which parameter it binds is not written
        params.add(positional[i])
    for keyword in call.keywords:
        if root(keyword.value, through_calls=False) != name:
            continue
        if keyword.arg is None or keyword.arg not in named:
            return None
        params.add(keyword.arg)
    return params


class _Body:
    def __init__(
        self,
        func: ast.FunctionDef | ast.AsyncFunctionDef,
        reads: Collection[str],
        read_functions: Collection[str],
        lookup: Callable[[str], ast.FunctionDef | ast.AsyncFunctionDef | None],
        depth: int,
    ) -> None:
        self.nodes = [n for stmt in func.body for n in ast.walk(stmt)]
        self.reads = reads
        self.read_functions = read_functions
        self.lookup = lookup
        self.depth = depth

    def changes(self, param: str) -> bool:
        """Whether the body may change what ``param`` (or a name bound to a part of it) holds."""
        names = self._aliases(param)
        for node in self.nodes:
            if isinstance(node, (ast.Global, ast.Nonlocal)) and names & set(node.names):
                return True  # rebinds the notebook's own name
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                if any(
                    root(t, through_calls=False) in names and not isinstance(t, ast.Name)
                    for t in flat_targets(targets)
                ):
                    return True
            elif isinstance(node, ast.Call) and any(self._call_changes(n, node) for n in names):
                return True
        return False

    def _aliases(self, param: str) -> set[str]:
        """``param`` and the names the body binds to it or a part of it (``m = param.module``)."""
        names = {param}
        while True:
            more = {
                t.id
                for node in self.nodes
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
                if root(node.value, through_calls=False) in names
                for t in flat_targets(node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(t, ast.Name)
            }
            if more <= names:
                return names
            names |= more

    def _call_changes(self, param: str, call: ast.Call) -> bool:
        func = call.func
        if isinstance(func, ast.Attribute) and root(func.value, through_calls=False) == param:
            return not (func.attr in self.reads or _mode_switch(func.attr, call))
        passed = [
            a
            for a in [*call.args, *(k.value for k in call.keywords)]
            if root(a, through_calls=False) == param
        ]
        if not passed:
            return False
        last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if last in self.read_functions:
            return False
        inner = self.lookup(func.id) if isinstance(func, ast.Name) else None
        if inner is None:
            return True  # a function whose body is not here may change it
        return changes_argument(
            inner,
            call,
            param,
            reads=self.reads,
            read_functions=self.read_functions,
            lookup=self.lookup,
            depth=self.depth + 1,
        )


def _mode_switch(method: str, call: ast.Call) -> bool:
    """``model.eval()``, ``model.train()``, ``model.train(False)``: a mode switch, not a change."""
    if method not in MODE_METHODS or call.keywords or len(call.args) > 1:
        return False
    return all(isinstance(a, ast.Constant) and isinstance(a.value, bool) for a in call.args)


def root(node: ast.AST, through_calls: bool = True) -> str | None:
    """The name an attribute/item(/call) chain starts from (``model.fc.weight`` -> ``model``).
    Not ``through_calls``: ``model(x).argmax()`` acts on the call's result, not on ``model``."""
    while True:
        if isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
            node = node.value
        elif isinstance(node, ast.Call) and through_calls:
            node = node.func
        else:
            break
    return node.id if isinstance(node, ast.Name) else None


def flat_targets(targets: Iterable[ast.expr]) -> Iterator[ast.expr]:
    """Assignment targets with tuples and lists unpacked."""
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            yield from flat_targets(target.elts)
        else:
            yield target
