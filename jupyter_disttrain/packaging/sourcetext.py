"""Cutting and re-indenting source text without changing what it means.

The script is built from the user's own text (comments included), not from ``ast.unparse``. Lines
that sit inside a multi-line string are never re-indented, since that would change the string.
"""

from __future__ import annotations

import ast


def string_interior_lines(tree: ast.AST) -> set[int]:
    """Line numbers (1-based) that continue a string literal begun on an earlier line."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) or (
            isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))
        ):
            end = node.end_lineno or node.lineno
            lines.update(range(node.lineno + 1, end + 1))
    return lines


def first_line(node: ast.stmt) -> int:
    """The first line of a statement, counting its decorators."""
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


def statement_lines(source: str, node: ast.stmt) -> list[str]:
    """The whole lines a statement spans (it must start its line, as compound statements do)."""
    lines = source.splitlines()
    return lines[first_line(node) - 1 : node.end_lineno or node.lineno]


def shift(
    lines: list[str], start_line: int, keep: set[int], *, indent: str = "", dedent: int = 0
) -> list[str]:
    """Re-indent ``lines`` (the first is line ``start_line`` of its source), leaving ``keep`` lines alone.

    Args:
        lines: the text lines.
        start_line: the 1-based line number of ``lines[0]`` in the source ``keep`` refers to.
        keep: lines inside multi-line strings, copied as they are.
        indent: prefix added to every other non-blank line.
        dedent: number of leading characters removed from every other line (only whitespace is removed).
    """
    out = []
    for number, line in enumerate(lines, start=start_line):
        if number in keep:
            out.append(line)
            continue
        if dedent:
            stripped = line[:dedent]
            line = line[dedent:] if not stripped.strip() else line.lstrip()
        out.append(indent + line if line.strip() else "")
    return out
