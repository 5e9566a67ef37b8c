"""Packaging a ``%%distrun`` cell into a standalone training script, and DDP pitfall checks.

``package_cell`` finds what the cell uses from earlier cells (imports, functions, classes, values,
objects rebuilt from the statements that made them, configuration),
writes a script that runs under ``torchrun`` on its own, and reports DDP pitfalls in everything
that goes into it.
"""

from .capture import PackagedScript, package_cell
from .pitfalls import Block, Pitfall, Target, check_blocks, check_pitfalls

__all__ = ["Block", "PackagedScript", "Pitfall", "Target", "check_blocks", "check_pitfalls", "package_cell"]
