"""Pitfall checks of PyTorch Lightning scripts under torchrun (the DDP and DeepSpeed ones are in
``ddp.py``), on the same reading of the tree (``code.py``); ``pitfalls/__init__.py`` runs them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .code import Code, Finding, call_name, int_constants, int_value, keyword_arg

CODES = ("lightning-devices", "lightning-spawn")
LIGHTNING = ("lightning", "pytorch_lightning")
# Strategies that start processes themselves: inside a job each rank would start more.
_SPAWNING = ("ddp_spawn", "ddp_notebook", "ddp_fork", "ddp_find_unused_parameters_spawn")


def _trainers(code: Code) -> Iterator[ast.Call]:
    if not any(module in code.imports for module in LIGHTNING):
        return
    for call in code.calls:
        if call_name(call) == "Trainer":
            yield call


def _count(node: ast.AST | None, constants: dict[str, int]) -> int | None:
    """A device count as written: an int, or a list of device ids (``[0, 1]``)."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return len(node.elts)
    return int_value(node, constants)


def _lightning_devices(code: Code) -> Iterator[Finding]:
    target = code.target
    if target is None or target.nproc_per_node is None:
        return
    constants = int_constants(code.tree)
    for call in _trainers(code):
        for word, job in (("devices", target.nproc_per_node), ("num_nodes", target.nodes)):
            asked = _count(keyword_arg(call, word), constants)
            if asked is not None and job is not None and asked > 0 and asked != job:
                flag = "--gpus" if word == "devices" else "--nodes"
                yield (
                    "lightning-devices",
                    call,
                    f"Trainer({word}={asked}) but the job runs {flag} {job} ({target.flags}): Lightning"
                    f" would wait for processes that never start; pass {word}={job} or change {flag}",
                )


def _lightning_spawn(code: Code) -> Iterator[Finding]:
    for call in _trainers(code):
        strategy = keyword_arg(call, "strategy")
        if isinstance(strategy, ast.Constant) and strategy.value in _SPAWNING:
            yield (
                "lightning-spawn",
                call,
                f"strategy={strategy.value!r} starts its own processes inside each rank of the job;"
                " use strategy='ddp': the job's ranks are the processes",
            )


CHECKS = (_lightning_devices, _lightning_spawn)
