"""No function of the package is hard to follow: radon's cyclomatic complexity stays below D.

The AST analysis in ``packaging/`` (one branch per node kind of Python's grammar) is exempt.
"""

from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_rank, cc_visit

PACKAGE = Path(__file__).resolve().parents[1] / "jupyter_disttrain"


def _blocks() -> list[tuple[str, str, int]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith("packaging/"):
            continue
        for block in cc_visit(path.read_text(encoding="utf-8")):
            found.append((f"{where}:{block.fullname}", cc_rank(block.complexity), block.complexity))
    return found


def test_no_function_ranks_d_or_worse() -> None:
    blocks = _blocks()
    assert len(blocks) > 300  # radon saw the package (methods and functions)
    too_complex = {name: f"{rank} ({cc})" for name, rank, cc in blocks if rank >= "D"}
    assert too_complex == {}
