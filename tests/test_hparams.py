"""Hyper-parameters captured at submit: the notebook's dict the cell uses, the arguments after
``--``; kept in the job's record and given to ``em.create_run`` without ``hparams=``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain import api, em
from jupyter_disttrain.errors import InvalidSpecError
from jupyter_disttrain.intake import spec_from_json
from jupyter_disttrain.packaging import package_cell
from jupyter_disttrain.specs import JobPhase
from jupyter_disttrain.store import JobStore
from jupyter_disttrain.tracking import hparams
from tests.em_helpers import run_record

HERE = str(Path(__file__).resolve().parents[1])


def test_script_arguments_become_hparams_as_argparse_would_name_them() -> None:
    args = ["data/", "--lr", "0.1", "--epochs=3", "--amp", "--warm-up", "-5", "--name", "mlp", "--no-x"]
    assert hparams.from_args(args) == {
        "lr": 0.1,
        "epochs": 3,
        "amp": True,
        "warm_up": -5,
        "name": "mlp",
        "no_x": True,
    }
    assert hparams.from_args(["--", "-v", "pos"]) == {}
    assert hparams.from_args(["--flag", "TRUE"]) == {"flag": True}


@dataclasses.dataclass
class Config:
    lr: float = 0.01
    layers: tuple[int, ...] = (64, 64)


def test_hparam_dicts_namespaces_and_dataclasses_are_flattened_and_bounded() -> None:
    ns = {
        "hparams": {"lr": 0.1, "opt": {"name": "sgd", "momentum": 0.9}, "bad": math.nan, "f": print},
        "config": Config(),
        "args": argparse.Namespace(lr=0.5, epochs=2),
        "params": [1, 2],  # not a mapping: not hyper-parameters
        "other": {"x": 1},  # not a hyper-parameter name
    }
    got = hparams.from_namespace(["hparams", "config", "args", "params", "other"], ns)
    assert got["lr"] == 0.1  # hparams is listed first: it wins over config and args
    assert got["opt.name"] == "sgd" and got["opt.momentum"] == 0.9
    assert got["bad"] == "nan" and got["f"].startswith("<built-in function print")
    assert got["layers"] == "(64, 64)" and got["epochs"] == 2
    assert "x" not in got
    assert hparams.from_namespace(["other"], ns) == {}
    assert hparams.from_namespace(["lr"], {"hparams": {"lr": 1}}) == {}  # the cell does not use it
    big = hparams.from_namespace(["hparams"], {"hparams": {f"k{i}": "v" * 150 for i in range(500)}})
    assert len(json.dumps(big)) <= hparams.MAX_JSON_BYTES and len(big) <= hparams.MAX_KEYS


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1], "hparams must be an object"),
        ({"lr": [0.1]}, "hparams.lr must be a number"),
        ({f"k{i}": i for i in range(300)}, "at most 200"),
    ],
)
def test_bad_hparams_in_a_submitted_spec_are_one_line(value: object, message: str) -> None:
    with pytest.raises(InvalidSpecError, match=message):
        spec_from_json({"name": "x", "hparams": value}, "local")


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.setenv("DISTTRAIN_JOB_ROOT", str(tmp_path / "jobs"))
    monkeypatch.setenv("DISTTRAIN_VIEW", "text")
    monkeypatch.setenv("PYTHONPATH", HERE)  # the ranks import this checkout's package
    monkeypatch.chdir(tmp_path)
    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext jupyter_disttrain", store_history=True)
    yield ip
    InteractiveShell.clear_instance()


def test_the_cells_hparams_dict_is_captured_by_packaging(shell: InteractiveShell) -> None:
    shell.run_cell("hparams = {'lr': 0.1, 'batch': 32}\nconfig = {'unused': 1}", store_history=True)
    packaged = package_cell("print(hparams['lr'])", list(shell.user_ns["In"][1:]), shell.user_ns)
    assert packaged.hparams == {"lr": 0.1, "batch": 32}
    shell.run_cell("def train():\n    return hparams['lr']", store_history=True)
    packaged = package_cell("train()", list(shell.user_ns["In"][1:]), shell.user_ns)
    assert packaged.hparams == {"lr": 0.1, "batch": 32}  # used through a captured function


def test_a_distrun_job_keeps_the_notebooks_hparams_and_em_uses_them(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    shell.run_cell("hparams = {'lr': 0.1, 'batch': 32}", store_history=True)
    cell = (
        "from jupyter_disttrain import em\n"
        "run = em.create_run('plain')\n"
        "run.log('train', {'loss': hparams['lr']}, step=0)\n"
        "run.finish()\n"
    )
    shell.run_cell_magic("distrun", "--gpus 1 --accelerator cpu --name hp -- --lr 0.2 --epochs 3", cell)
    store = JobStore(tmp_path / "jobs")
    (job_id,) = store.ids()
    job = api.get_job(job_id, store=store)
    assert job.wait(timeout=120).phase is JobPhase.SUCCEEDED, [ln.text for ln in job.logs()][-10:]
    expected = {"lr": 0.2, "batch": 32, "epochs": 3}  # the script's arguments win over the dict
    assert store.read_record(job_id).spec.hparams == expected
    assert run_record(job.dir / "runs" / "plain")["hparams"] == expected


def test_create_run_without_hparams_takes_the_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DISTTRAIN_HPARAMS", '{"lr": 0.3}')
    with em.create_run("from-env") as run:
        assert run.hparams == {"lr": 0.3}
    with em.create_run("explicit", hparams={"lr": 1}) as run:
        assert run.hparams == {"lr": 1}
    monkeypatch.setenv("DISTTRAIN_HPARAMS", "not json")
    with em.create_run("broken") as run:
        assert run.hparams == {}
