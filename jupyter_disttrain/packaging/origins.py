"""Where each line of a packaged script came from: the notebook cell and the line JupyterLab shows.

A failing rank's traceback names ``train.py, line 34``; the user wrote ``Cell In[3], line 9``.
The script is made of the user's own lines (re-indented under the main guard, marked with the
cell they came from: a ``# In [3]`` heading, a ``  # In [3]`` suffix, ``# In [3] line 2`` before
a replayed statement), so each of its lines is found again in the cell its mark names, in order.
Lines the packaging wrote itself (the guard, the value prelude) map to nothing and are shown as
the script's.

The map goes to the job dir as ``ORIGINS_FILE`` (JSON, see ``Origins``): numbers only, never the
cells' text (an earlier cell may hold a secret the script does not use). A traceback is shown
with its source lines as IPython shows a cell's from the script itself: each mapped line says
where its text is in the script line and how far the cell indented it, and the user's comments
are mapped too, so the lines before a frame's line read as in the cell.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model.tracebacks import ORIGINS_FILE as ORIGINS_FILE  # a side file of the job (beside the script)

_MARK = re.compile(r"In \[(\d+)\](?: line (\d+))?")
_SUFFIX = re.compile(r"\s+# In \[\d+\](?:, In \[\d+\])*$")
_CELL_SECTION = "# --- The %%distrun cell ---"
CELL_LABEL = "In [ ]"  # the %%distrun cell's label where its execution count is not known


@dataclass
class Origins:
    """``cells``: each cell's label (``In [3]``) and its first line's number; ``lines``: script
    line -> (index into ``cells``, line in that cell as JupyterLab numbers it, the cell's
    indentation of it, the length of its text: the script line's text without its indentation
    and its ``# In [3]`` mark)."""

    cells: list[tuple[str, int]] = field(default_factory=list)  # (label, first line's number)
    lines: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "cells": [{"label": label, "first": first} for label, first in self.cells],
            "lines": [[at, *where] for at, where in sorted(self.lines.items())],
        }


class _Cursor:
    """Finds lines of one cell in order: the next equal line after the last one found."""

    def __init__(self, index: int, text: str, first: int) -> None:
        self.index = index
        self.first = first
        raw = text.split("\n")
        self.lines = [line.strip() for line in raw]
        self.indents = [len(line) - len(line.lstrip()) for line in raw]
        self.at = 0

    def seek(self, line: int) -> None:
        self.at = max(0, line - self.first)

    def find(self, stripped: str) -> int | None:
        for i in (*range(self.at, len(self.lines)), *range(0, self.at)):
            if self.lines[i] == stripped:
                self.at = i + 1
                return i + self.first
        return None


def script_origins(
    source: str, cell: str, cell_label: str, history: Sequence[str], cell_line: int = 1
) -> Origins:
    """The origin of each line of ``source``, the script made of ``cell`` (labelled ``cell_label``,
    its first line numbered ``cell_line``) and the ``history`` cells (``In [1]``, ``In [2]``...)."""
    origins = Origins()
    cursors: dict[str, _Cursor] = {}

    def cursor(label: str) -> _Cursor | None:
        if label not in cursors:
            if label == cell_label:
                text, first = cell, cell_line
            else:
                n = int(label[4:-1])
                if not 1 <= n <= len(history) or not isinstance(history[n - 1], str):
                    return None
                text, first = history[n - 1], 1
            cursors[label] = _Cursor(len(origins.cells), text, first)
            origins.cells.append((label, first))
        return cursors[label]

    hints: list[str] = []
    for number, line in enumerate(source.split("\n"), start=1):
        stripped = line.strip()
        if stripped == _CELL_SECTION:
            hints = [cell_label]
            continue
        if stripped.startswith("# In ["):
            hints = _hint(stripped, hints, cursor)
            continue
        marks = _MARK.findall(line[line.rfind("#") :]) if _SUFFIX.search(line) else []
        if marks:
            hints = [f"In [{n}]" for n, _ in marks]
            stripped = _SUFFIX.sub("", line).strip()
        if not stripped:
            continue
        for label in hints:
            found = cursor(label)
            at = found.find(stripped) if found else None
            if found is not None and at is not None:
                origins.lines[number] = (found.index, at, found.indents[at - found.first], len(stripped))
                break
    return origins


def _hint(comment: str, hints: list[str], cursor: Any) -> list[str]:
    """The cells a comment line points at (``# In [3]``, ``# In [3] line 2``), else ``hints``."""
    marks = _MARK.findall(comment)
    if not marks:
        return hints
    for n, line in marks:
        if line and (found := cursor(f"In [{n}]")) is not None:
            found.seek(int(line))
    return [f"In [{n}]" for n, _ in marks]
