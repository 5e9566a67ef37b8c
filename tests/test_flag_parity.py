"""%%distrun and `jupyter disttrain run` take the same flags and make the same job from them."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain.commands import _parser
from jupyter_disttrain.jobs.intake import spec_from_flags
from jupyter_disttrain.jobs.manager import manager_for
from jupyter_disttrain.model.specs import JobSpec
from jupyter_disttrain.notebook.magics import DistTrainMagics
from jupyter_disttrain.storage.store import JobStore


def _magic_parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = DistTrainMagics.distrun.parser  # type: ignore[attr-defined]
    return parser


def _cli_run_parser() -> argparse.ArgumentParser:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["run"]


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s not in ("-h", "--help")}


def test_every_flag_of_the_magic_is_a_flag_of_the_cli_run() -> None:
    magic, cli = _flags(_magic_parser()), _flags(_cli_run_parser())
    assert len(magic) > 25  # the job's words, every backend's options, how to run it
    assert magic <= cli, magic - cli
    for flag in ("--dry-run", "--accelerator", "--shm-size", "--toleration", "--exit-timeout", "--no-check"):
        assert flag in cli


LINES = [
    "--gpus 2 --name same --env MSG=hi --env B=2 --max-restarts 1 --oversubscribe --exit-timeout 60"
    " --resume other-abcde:20 --keep-checkpoints 3",
    "--gpus 1 --nodes 2 --name same --accelerator cpu --grace-period 3",
    "--backend kubernetes --gpus 4 --nodes 2 --name same --image pytorch:2 --pvc data:/data:ro --cpu 8"
    " --memory 64Gi --shm-size 16Gi --node-selector gpu=a100 --toleration nvidia.com/gpu:NoSchedule"
    " --namespace team --service-account trainer --priority-class high --queue q --flavor pytorchjob",
]


def _specs(line: str, tmp_path: Path) -> tuple[JobSpec, JobSpec]:
    words = line.split()
    magic = spec_from_flags(_magic_parser().parse_args(words), ["--epochs", "3"], default_name="distrun")
    cli_args = _cli_run_parser().parse_args([str(tmp_path / "train.py"), *words])
    cli = spec_from_flags(cli_args, ["--epochs", "3"], default_name="train")
    return magic, cli


@pytest.mark.parametrize("line", LINES)
def test_the_same_flags_give_the_same_dry_run_request(line: str, tmp_path: Path) -> None:
    magic, cli = _specs(line, tmp_path)
    assert magic == cli
    manager = manager_for(JobStore(tmp_path / "jobs"))
    backend = manager.backend(magic.backend)
    requests = [
        backend.dryrun(spec, script="print(1)\n", job_id="same-abcde").request for spec in (magic, cli)
    ]
    # Several local agents meet on a port free at that moment: the one thing two dry runs differ in.
    texts = [
        re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", json.dumps(r.to_json(), sort_keys=True))
        for r in requests
    ]
    assert texts[0] == texts[1]


def test_the_cli_dry_run_prints_the_request_and_warns_like_the_magic(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter_disttrain.cli",
            "--root",
            str(tmp_path / "jobs"),
            "run",
            str(script),
            "--gpus",
            "2",
            "--accelerator",
            "cpu",
            "--dry-run",
            "--",
            "--epochs",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "torch.distributed.run" in run.stdout and "--epochs 3" in run.stdout
    assert "[silence: --no-check" in run.stdout  # .cuda() on a CPU job: the magic's DDP check
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())


def test_the_magic_dry_run_uses_the_generated_flags(shell: InteractiveShell, tmp_path: Path, capsys) -> None:
    shell.run_line_magic("load_ext", "jupyter_disttrain")
    shell.run_cell_magic("distrun", "--gpus 2 --grace-period 3 --exit-timeout 9 --dry-run", "print('hi')\n")
    out = capsys.readouterr().out
    assert "torch.distributed.run" in out and "--nproc-per-node=2" in out
