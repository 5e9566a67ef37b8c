"""Packaging a ``%%distrun`` cell into a standalone training script, and DDP pitfall checks.

``package_cell`` finds what the cell uses from earlier cells (imports, functions, classes, values),
writes a script that runs under ``torchrun`` on its own, and reports DDP pitfalls in the cell.
"""

from .capture import PackagedScript, package_cell
from .pitfalls import Pitfall, check_pitfalls

__all__ = ["PackagedScript", "Pitfall", "check_pitfalls", "package_cell"]
