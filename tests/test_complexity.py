"""No function of the package is hard to follow: radon's cyclomatic complexity stays below D;
no class is too long to read: at most 300 lines; and no module either: at most 600 lines (a
module past that owns more than one thing: split it along what it owns, as ``packaging/pitfalls/``,
``payloads/`` and ``notebook/widgets.py`` + ``textview.py`` were).

No module is exempt: the AST analysis in ``packaging/`` splits its cases into functions like the
rest (a visitor's one-method-per-node-kind classes rank low anyway).
"""

from __future__ import annotations

import ast
from pathlib import Path

from radon.complexity import cc_rank, cc_visit

PACKAGE = Path(__file__).resolve().parents[1] / "jupyter_disttrain"
MAX_CLASS_LINES = 300
MAX_MODULE_LINES = 600


def _blocks() -> list[tuple[str, str, int]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        for block in cc_visit(path.read_text(encoding="utf-8")):
            found.append((f"{where}:{block.fullname}", cc_rank(block.complexity), block.complexity))
    return found


def test_no_function_ranks_d_or_worse() -> None:
    blocks = _blocks()
    assert len(blocks) > 300  # radon saw the package (methods and functions)
    assert any(name.startswith("packaging/") for name, _, _ in blocks)  # the AST analysis too
    too_complex = {name: f"{rank} ({cc})" for name, rank, cc in blocks if rank >= "D"}
    assert too_complex == {}


def test_no_class_is_over_300_lines() -> None:
    sizes = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                where = f"{path.relative_to(PACKAGE).as_posix()}:{node.name}"
                sizes[where] = (node.end_lineno or node.lineno) - node.lineno + 1
    assert len(sizes) > 100  # the walk saw the package's classes
    too_long = {where: lines for where, lines in sizes.items() if lines > MAX_CLASS_LINES}
    assert too_long == {}


def test_no_module_is_over_600_lines() -> None:
    sizes = {
        path.relative_to(PACKAGE).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    assert len(sizes) > 150 and max(sizes.values()) > MAX_MODULE_LINES // 2  # the count saw the package
    too_long = {where: lines for where, lines in sizes.items() if lines > MAX_MODULE_LINES}
    assert too_long == {}
