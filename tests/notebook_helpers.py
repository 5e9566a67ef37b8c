"""Run cells in a real kernel (nbclient) and read what each printed."""

from __future__ import annotations

from pathlib import Path

from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook


def run_cells(cells: list[str], path: Path, timeout: int = 300) -> list[str]:
    """Execute ``cells`` in a fresh python3 kernel whose working dir is ``path``; the text
    each cell printed (its stream outputs), in order."""
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path)}}
    ).execute()
    return ["".join(o.get("text", "") for o in cell.outputs) for cell in nb.cells]
