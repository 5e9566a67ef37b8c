"""Warnings about common mistakes in distributed (DDP) training code, read from the script's syntax tree.

The checks read everything that goes into the script (the cell and the functions and classes taken
from earlier cells, given as :class:`Block` s) as one module, so a save inside a training function
of an earlier cell is seen, and a function called only under ``if rank == 0:`` in the cell counts as
guarded. Each warning names the cell and line as JupyterLab shows them.

Each check has a stable code. A warning is silenced by passing its code in ``ignore`` or by a
trailing ``# distrun: ignore[code]`` (several codes: ``ignore[code-a, code-b]``) on one of the lines
of the flagged expression. The checks are heuristics on the text; they run nothing.

The checks live by what they look at: ``ddp.py`` (saves, DDP, devices, ranks) and ``lightning.py``
(Lightning's Trainer), on one reading of the tree (``code.py``).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from . import ddp, lightning
from .code import Code, Target

CODES = (
    "sampler-set-epoch",
    "unguarded-save",
    "ddp-state-dict",
    "data-parallel",
    "hardcoded-rank",
    "cuda-without-device",
    "cuda-without-gpu",
    "world-size-mismatch",
    "unguarded-writer",
    "guarded-collective-save",
    # lightning.py
    "lightning-devices",
    "lightning-spawn",
)
_SILENCE = re.compile(r"#\s*distrun:\s*ignore\[([^\]]*)\]")

__all__ = ["CODES", "Block", "Pitfall", "Target", "check_blocks", "check_pitfalls", "silenced_codes"]


@dataclass
class Pitfall:
    """A warning on the script.

    Attributes:
        code: stable id, e.g. "sampler-set-epoch".
        line: 1-based line number in its cell, as JupyterLab shows it.
        message: one line: what is wrong and what to write instead.
        cell: the earlier cell it is in ("In [3]"); "" for the ``%%distrun`` cell.
    """

    code: str
    line: int
    message: str
    cell: str = ""

    @property
    def where(self) -> str:
        """``line 4`` in the %%distrun cell, ``In [3] line 4`` in an earlier one."""
        return f"{self.cell} line {self.line}" if self.cell else f"line {self.line}"


@dataclass(frozen=True)
class Block:
    """A piece of code that goes into the script.

    Attributes:
        source: its text (module-level code).
        cell: the earlier cell it comes from ("In [3]"); "" for the ``%%distrun`` cell.
        first_line: the line of ``source``'s first line in that cell, as JupyterLab numbers it.
    """

    source: str
    cell: str = ""
    first_line: int = 1


def check_pitfalls(
    source: str, ignore: Collection[str] = (), *, target: Target | None = None
) -> list[Pitfall]:
    """Look for DDP pitfalls in ``source`` (one cell); a cell that does not parse gives no warnings."""
    return check_blocks([Block(source)], ignore, target=target)


def check_blocks(
    blocks: Sequence[Block], ignore: Collection[str] = (), *, target: Target | None = None
) -> list[Pitfall]:
    """Look for DDP pitfalls in everything that goes into the script, read as one module.

    Args:
        blocks: the script's code in script order (a block that does not parse is left out).
        ignore: codes not to report (``"*"``: none at all).
        target: what the job runs on; without it the checks that depend on it do not run.

    Returns:
        The warnings, ordered by cell (earlier cells first) and line.
    """
    parsed = [b for b in blocks if _parses(b.source)]
    # Combined line -> (block, line in the block): blocks are joined one after the other.
    # Lines as the parser counts them (str.splitlines also splits at form feeds and the like).
    texts = [b.source.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n").split("\n") for b in parsed]
    owners = [(block, n) for block, text in zip(parsed, texts, strict=True) for n in range(1, len(text) + 1)]
    source = "\n".join("\n".join(text) for text in texts)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # blocks that parse alone always parse together; be safe anyway
        return []
    code = Code(tree, target)
    silenced = silenced_codes(source)
    found = []
    for check in (*ddp.CHECKS, *lightning.CHECKS):
        for name, node, message in check(code):
            lines = range(getattr(node, "lineno", 1), (getattr(node, "end_lineno", None) or 1) + 1)
            if name in ignore or "*" in ignore or any(name in silenced.get(line, ()) for line in lines):
                continue
            block, line = owners[min(getattr(node, "lineno", 1), len(owners)) - 1]
            found.append(Pitfall(name, block.first_line + line - 1, message, block.cell))
    order = {block.cell: i for i, block in enumerate(parsed)}
    return sorted(found, key=lambda p: (not p.cell, order.get(p.cell, 0), p.line, p.code))


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return True


def silenced_codes(source: str) -> dict[int, set[str]]:
    """Line -> codes silenced there by a ``# distrun: ignore[...]`` comment."""
    silenced: dict[int, set[str]] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT and (match := _SILENCE.search(token.string)):
                codes = {c.strip() for c in match.group(1).split(",") if c.strip()}
                silenced.setdefault(token.start[0], set()).update(codes)
    except (tokenize.TokenError, SyntaxError):
        pass
    return silenced
