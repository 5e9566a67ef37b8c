"""What the dry run says about the capture: how every name got into the script, and which top-level
statements of earlier cells did not, and why (so nothing is dropped without a word)."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .sourcetext import first_line
from .values import ARRAY_FILE, TENSOR_FILE

if TYPE_CHECKING:
    from .resolve import Item, Resolver

# The dry run lists at most this many left-out statements (a long notebook has hundreds).
MAX_LEFT_OUT = 40


def explain(items: Sequence[Item], resolver: Resolver) -> list[str]:
    """One line per captured name or configuration statement, then the left-out statements."""
    kept: set[int] = set()
    by_value: set[str] = set()
    lines = [_how(item, resolver, kept, by_value) for item in items]
    return lines + _left_out(resolver, kept, by_value)


def _how(item: Item, resolver: Resolver, kept: set[int], by_value: set[str]) -> str:
    """How ``item`` got into the script; the history statements it stands for join ``kept``, a
    name sent by value joins ``by_value``."""
    if item.replayed:
        kept.update(s.order for s in item.replayed)
    if item.config:
        stmt = item.replayed[0]
        return f"config {stmt.where}: `{_short(stmt.text)}` (runs before the cell, in order)"
    names = [n for n, i in resolver.items.items() if i is item and not item.config] or [item.name]
    shown = ", ".join(names)
    if item.replayed:
        where = ", ".join(s.where for s in item.replayed)
        line = f"{shown}: by source, replaying {where}"
        if item.state:
            line += f"; trained state of {', '.join(item.state)} loaded from side file {TENSOR_FILE}"
        return line
    index = resolver.index
    definition = index.defs.get(item.name)
    origin = f" ({item.label})" if item.label else " (from the kernel namespace)"
    if item.section == "import":
        kept.update(d.order for d in index.imports.get(item.name, []))
        return f"{shown}: import{origin}"
    if definition is not None and definition.kind == "source" and item.label == definition.label:
        kept.add(definition.order)
        return f"{shown}: by source, {definition.label} line {_line(definition.node)}"
    by_value.add(item.name)
    text = "\n".join(item.lines)
    side = next((f for f, key in _SIDE.items() if key in text), "")
    how = f"by value, side file {side}" if side else "by value, inline"
    return f"{shown}: {how}{origin}"


def _left_out(resolver: Resolver, kept: set[int], by_value: set[str]) -> list[str]:
    """The top-level statements of earlier cells not in the script, and why (at most ``MAX_LEFT_OUT``)."""
    left = []
    for stmt in resolver.index.statements:
        if stmt.order in kept:
            continue
        why = resolver.left_out.get(stmt.order) or _default_reason(stmt.bound, by_value, stmt.magic)
        left.append(f"left out {stmt.where}: `{_short(stmt.text)}`: {why}")
    if len(left) > MAX_LEFT_OUT:
        left = [*left[:MAX_LEFT_OUT], f"... and {len(left) - MAX_LEFT_OUT} more statements left out"]
    return left


_SIDE = {TENSOR_FILE: "_CAPTURED_TENSORS[", ARRAY_FILE: "_CAPTURED_ARRAYS["}


def _default_reason(bound: set[str], by_value: set[str], magic: bool) -> str:
    if magic:
        return "a magic or shell command (does not run in the job)"
    sent = sorted(bound & by_value)
    if sent:
        return f"{', '.join(sent)} sent by value instead"
    if bound:
        return f"binds {', '.join(sorted(bound))}, which the cell does not use"
    return "changes nothing the cell uses"


def _line(node: object) -> int:
    return first_line(node) if isinstance(node, ast.stmt) else 1


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= 60 else flat[:57] + "..."
