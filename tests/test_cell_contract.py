"""The click contract between the view under a %%distrun cell and the lab extension is declared
alike on both sides: notebook/contract.py's constants and labextension/cellcontract.ts (with the command
ids of labextension/ids.ts)."""

import re
from pathlib import Path

from jupyter_disttrain.notebook import contract, widgets

LAB = Path(__file__).resolve().parents[1] / "labextension"


def _ts_strings(name: str) -> dict[str, str]:
    """``NAME = 'value'`` and ``key: 'value'`` string constants of a TypeScript module."""
    text = (LAB / name).read_text(encoding="utf-8")
    return dict(re.findall(r"(\w+)(?: =|:) '([^']*)'", text))


def test_the_view_and_lab_extension_declare_the_same_contract() -> None:
    declared, commands = _ts_strings("cellcontract.ts"), _ts_strings("ids.ts")
    assert declared["CELL_COMMAND_ATTRIBUTE"] == contract.COMMAND_ATTRIBUTE
    assert declared["CELL_JOB_ATTRIBUTE"] == contract.JOB_ATTRIBUTE
    assert declared["CELL_CANCEL_CLASS"] == contract.CANCEL_CLASS
    assert declared["CELL_JOB_CLASS_PREFIX"] == contract.JOB_CLASS_PREFIX
    assert commands["logs"] == contract.LOGS_COMMAND
    assert commands["tensorboard"] == contract.TENSORBOARD_COMMAND
    assert commands["diagnose"] == contract.DIAGNOSE_COMMAND
    # the commands a cell's buttons ask for are among those the lab accepts from cells
    cell_commands = re.search(r"CELL_COMMANDS[^=]*= \[([^\]]*)\]", (LAB / "cellcontract.ts").read_text())
    assert cell_commands is not None
    accepted = {commands[key] for key in re.findall(r"CommandIDs\.(\w+)", cell_commands.group(1))}
    assert {contract.LOGS_COMMAND, contract.TENSORBOARD_COMMAND, contract.DIAGNOSE_COMMAND} <= accepted


def test_the_buttons_carry_the_contract() -> None:
    html = widgets._lab_buttons("mnist-ddp-k3x9q")
    for command in (contract.LOGS_COMMAND, contract.TENSORBOARD_COMMAND, contract.DIAGNOSE_COMMAND):
        assert f'{contract.COMMAND_ATTRIBUTE}="{command}" {contract.JOB_ATTRIBUTE}="mnist-ddp-k3x9q"' in html
