"""Which launcher a script needs, by what it calls: ``deepspeed.initialize(...)`` needs DeepSpeed's."""

from __future__ import annotations

import ast

# A call whose dotted name ends so (``deepspeed.initialize``, ``ds.initialize`` after
# ``import deepspeed as ds``) picks the launcher.
_CALLS = {("deepspeed", "initialize"): "deepspeed"}


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local names of imported modules (``import deepspeed as ds`` -> {"ds": "deepspeed"})."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return out


def detect(source: str) -> str | None:
    """The launcher a script needs, by what it calls (``deepspeed.initialize``), or None."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    aliases = _aliases(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            dotted = f"{aliases.get(func.value.id, func.value.id)}.{func.attr}"
        elif isinstance(func, ast.Name):
            dotted = aliases.get(func.id, func.id)
        else:
            continue
        module, _, attr = dotted.rpartition(".")
        launcher = _CALLS.get((module.split(".")[0], attr))
        if launcher:
            return launcher
    return None
