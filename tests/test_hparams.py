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
from jupyter_disttrain.jobs.intake import spec_from_json
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.packaging import package_cell
from jupyter_disttrain.storage.store import JobStore
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


def _captured(shell: InteractiveShell, cell: str) -> dict[str, object]:
    return package_cell(cell, list(shell.user_ns["In"][1:]), shell.user_ns).hparams


def test_the_keys_the_script_reads_of_the_cells_hparams_dict_are_captured(shell: InteractiveShell) -> None:
    shell.run_cell(
        "import argparse\nhparams = {'lr': 0.1, 'batch': 32, 'opt': {'name': 'sgd', 'beta': 0.9}}\n"
        "config = {'unused': 1}\nargs = argparse.Namespace(epochs=3, seed=1)",
        store_history=True,
    )
    assert _captured(shell, "print(hparams['lr'], hparams.get('batch', 8))") == {"lr": 0.1, "batch": 32}
    assert _captured(shell, "print(args.epochs)") == {"epochs": 3}
    shell.run_cell("def train():\n    return hparams['lr']", store_history=True)
    assert _captured(shell, "train()") == {"lr": 0.1}  # read by a captured function
    shell.run_cell("def optimizer(h):\n    return h['opt']['name']", store_history=True)
    assert _captured(shell, "optimizer(h=hparams)") == {"opt.name": "sgd"}  # followed into its body
    assert _captured(shell, "print(hparams['opt'])") == {"opt.name": "sgd", "opt.beta": 0.9}
    # Handed whole to code whose body is not here, or iterated: every key counts as read.
    everything = {"lr": 0.1, "batch": 32, "opt.name": "sgd", "opt.beta": 0.9}
    assert _captured(shell, "print(hparams)") == everything
    assert _captured(shell, "for k in hparams.items():\n    pass") == everything
    assert _captured(shell, "key = 'lr'\nprint(hparams[key])") == everything


def test_credential_like_keys_are_kept_with_their_values_masked() -> None:
    for key in ("password", "db_password", "secret", "client_secret", "hf_token", "api_key", "apiKey",
                "APIKEY", "aws_secret_access_key", "wandb.api_key", "passphrase", "auth", "db_pass",
                "pwd", "auth_header", "smtpPass", "cookie"):  # fmt: skip
        assert hparams.looks_like_credential(key), key
    for key in ("lr", "max_tokens", "pad_token_id", "tokenizer", "keyframes", "monkey", "author"):
        assert not hparams.looks_like_credential(key), key
    got = hparams.from_namespace(["config"], {"config": {"lr": 0.1, "wandb": {"api_key": "k-1"}}})
    assert got == {"lr": 0.1, "wandb.api_key": hparams.MASKED}
    assert hparams.from_args(["--hf-token", "hf_x", "--lr", "1"]) == {"hf_token": hparams.MASKED, "lr": 1}
    assert hparams.masked_keys(got) == ["wandb.api_key"]


SECRETS = ("p-1", "t-2", "pw-3", "x-4", "y-5", "z-6", "ghp-7", "k-8")


class Client:
    """An object whose text shows a credential (as a client's repr may)."""

    def __repr__(self) -> str:
        return "Client(api_key='k-8', retries=3)"


def test_credentials_are_masked_at_every_depth_in_urls_and_under_more_names() -> None:
    values = {
        "nested": {"a": {"b": {"password": "p-1"}, "c": [{"token": "t-2"}]}},
        "db_url": "postgresql://user:pw-3@db.example/app",
        "db_pass": "x-4",
        "pwd": "y-5",
        "auth_header": "Bearer z-6",
        "repo": "https://ghp-7@github.com/team/repo",
        "client": {"x": {"y": Client()}},
        "lr": 0.1,
        "max_tokens": 5,
        "author": "me",
    }
    got = hparams.from_namespace(["config"], {"config": values})
    assert not any(s in json.dumps(got) for s in SECRETS), got
    assert got["db_url"] == "postgresql://user:<masked>@db.example/app"
    assert got["db_pass"] == got["pwd"] == got["auth_header"] == hparams.MASKED
    assert (got["lr"], got["max_tokens"], got["author"]) == (0.1, 5, "me")
    assert "nested.a.b" in hparams.masked_keys(got) and "lr" not in hparams.masked_keys(got)
    assert hparams.from_args(["--db-url", "mysql://u:pw-3@h/x"]) == {"db_url": "mysql://u:<masked>@h/x"}


def test_em_create_run_masks_the_hparams_it_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    given = {"db": {"url": "postgresql://u:pw-3@h/x", "password": "p-1"}, "hf_token": "t-2", "lr": 0.5}
    with em.create_run("given", hparams=given) as run:
        assert run.hparams["lr"] == 0.5 and run.hparams["hf_token"] == hparams.MASKED
    record = (tmp_path / ".disttrain" / "runs" / "given" / "run.json").read_text()
    assert not any(s in record for s in SECRETS) and "<masked>" in record
    assert given["hf_token"] == "t-2"  # the caller's own dict is left as it was


def test_hparams_given_to_the_api_are_masked_too(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs")
    given = {"lr": 1, "db_password": "pw-789"}
    info = api.dryrun("print(1)", store=store, hparams=given, args=["--token", "t"])
    assert "pw-789" not in info.text and "<masked>" in info.text


def test_a_jobs_records_never_hold_a_credentials_value(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell("def login(c):\n    return c['wandb']", store_history=True)
    shell.run_cell(  # the magic takes In[1:-1] as the earlier cells: this one is the last
        "config = {'lr': 0.1, 'batch': 32, 'db_password': 'hunter2-unread', "
        "'wandb': {'api_key': 'k-123-read', 'project': 'p'}, 'hf_token': 'hf-456-read'}",
        store_history=True,
    )
    cell = (
        "import os\nfrom jupyter_disttrain import em\n"
        "print(len(config['hf_token']), sorted(login(config)), config['lr'])\n"
        "print('env', os.environ['DISTTRAIN_HPARAMS'])\n"
        "with em.create_run('plain') as run:\n    run.log('train', {'loss': config['lr']}, step=0)\n"
    )
    shell.run_cell_magic("distrun", "--gpus 1 --accelerator cpu --name hp", cell)
    said = capsys.readouterr().out
    assert said.count("note: the job's records") == 1
    assert "keep wandb.api_key, hf_token as <masked>: names that look like credentials" in said
    store = JobStore(tmp_path / "jobs")
    (job_id,) = store.ids()
    job = api.get_job(job_id, store=store)
    assert job.wait(timeout=120).phase is JobPhase.SUCCEEDED, [ln.text for ln in job.logs()][-10:]
    expected = {"lr": 0.1, "wandb.api_key": "<masked>", "wandb.project": "p", "hf_token": "<masked>"}
    assert store.read_record(job_id).spec.hparams == expected
    assert run_record(job.dir / "runs" / "plain")["hparams"] == expected
    (env,) = [ln.text.removeprefix("env ") for ln in job.logs() if ln.text.startswith("env ")]
    assert json.loads(env) == expected  # what every rank gets in DISTTRAIN_HPARAMS
    # Only the script itself holds the values (it needs them): no record, log or event file does.
    for path in job.dir.rglob("*"):
        if path.is_file() and path.name != "train.py":
            data = path.read_bytes()
            assert not any(s in data for s in (b"hunter2", b"k-123", b"hf-456")), path


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
    expected = {"lr": 0.2, "epochs": 3}  # the script's arguments win over the dict, which gives what is read
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
