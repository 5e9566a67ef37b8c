"""Launchers lay a job out in roles; the local backend runs what they produce (dry runs: no
process starts here); torchrun jobs keep their ``rank-N`` replicas, as recorded before roles."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.backends.agents.request import LocalRequest, request_roles
from jupyter_disttrain.jobs.intake import choose_launcher, job_flag_classes, spec_from_flags
from jupyter_disttrain.jobs.manager import manager_for
from jupyter_disttrain.launchers import get_launcher
from jupyter_disttrain.launchers.base import PROCESS, LaunchContext, Role, replicas_of
from jupyter_disttrain.launchers.calls import detect
from jupyter_disttrain.launchers.deepspeed import CONFIG_FILE
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.flags import add_flags
from jupyter_disttrain.model.specs import JobSpec
from jupyter_disttrain.payloads.jobs import RoleSummary
from jupyter_disttrain.storage.store import JobStore

DS_CELL = """
import deepspeed as ds
engine, *_ = ds.initialize(model=model, model_parameters=model.parameters(), config=cfg)
"""


def _flags(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_flags(parser.add_argument, job_flag_classes())
    return parser.parse_args(list(argv))


def _spec(tmp_path: Path, *argv: str, script_args: tuple[str, ...] = ()) -> JobSpec:
    spec = spec_from_flags(_flags("--backend", "local", *argv), list(script_args), "t")
    spec.working_dir = str(tmp_path)
    return spec


def test_a_torchrun_job_has_one_worker_role_whose_replicas_are_its_ranks(store: JobStore) -> None:
    info = api.dryrun("print(1)", store=store, gpus=2, accelerator="cpu")
    roles = [Role.from_json(r) for r in info.request.to_json()["roles"]]
    assert roles == [Role("worker", 2, [])]
    assert replicas_of(roles) == [("rank-0", "worker", 0), ("rank-1", "worker", 1)]
    assert {a["role"] for a in info.request.to_json()["agents"]} == {"worker"}


def test_a_job_recorded_before_roles_reads_as_torchrun_workers(store: JobStore) -> None:
    spec = JobSpec(name="old", nproc_per_node=2, accelerator="cpu", args=["--epochs", "1"])
    old = {"cwd": "/tmp", "agents": [{"node": 0, "argv": ["torchrun"], "env": {}}]}
    request = LocalRequest.from_json(old)
    assert request.agents[0].role == "worker"
    assert request_roles(spec, request) == [Role("worker", 2, ["--epochs", "1"])]
    record = type("R", (), {"request": old})()
    status = type("S", (), {"replicas": []})()
    assert RoleSummary.of(record, status) == []  # type: ignore[arg-type]


def test_replicas_of_a_process_role_are_named_by_role() -> None:
    roles = [Role("scheduler", 1, via=PROCESS), Role("server", 2, via=PROCESS)]
    assert [name for name, _, _ in replicas_of(roles)] == ["scheduler-0", "server-0", "server-1"]


def test_a_submitted_job_lists_its_roles_over_the_job_layer(store: JobStore, tmp_path: Path) -> None:
    spec = _spec(tmp_path, "--gpus", "2", "--accelerator", "cpu")
    job_id = manager_for(store).backend("local").submit(spec, "print('hi')")
    try:
        detail = manager_for(store).detail(job_id)
        assert [(r.name, r.replicas) for r in detail.roles] == [("worker", 2)]
        assert detail.summary.launcher == "torchrun"
        assert [(r.name, r.role) for r in detail.status.replicas] == [
            ("rank-0", "worker"),
            ("rank-1", "worker"),
        ]
    finally:
        api.get_job(job_id, store).wait(timeout=240)


def test_the_launcher_is_chosen_when_the_cell_calls_deepspeed_initialize(tmp_path: Path) -> None:
    assert detect(DS_CELL) == "deepspeed"
    assert detect("from deepspeed import initialize\ninitialize(model=m)") == "deepspeed"
    assert detect("import torch\ntorch.distributed.init_process_group('gloo')") is None
    spec = _spec(tmp_path)
    assert choose_launcher(spec, False, DS_CELL) is not None
    assert spec.launcher == "deepspeed"
    spec = _spec(tmp_path, "--launcher", "torchrun")
    assert choose_launcher(spec, True, DS_CELL) is None and spec.launcher == "torchrun"


def test_a_launcher_option_chooses_its_launcher(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "--ds-config", "ds.json")
    assert (spec.launcher, spec.launcher_options) == ("deepspeed", {"ds_config": "ds.json"})
    with pytest.raises(InvalidSpecError, match="unknown launcher 'mpi'"):
        JobSpec(launcher="mpi").validate()


def test_deepspeed_ships_its_config_and_points_the_script_at_the_copy(
    store: JobStore, tmp_path: Path
) -> None:
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 8}))
    spec = _spec(
        tmp_path,
        "--gpus",
        "2",
        "--accelerator",
        "cpu",
        script_args=("--deepspeed", "--deepspeed_config", "ds.json"),
    )
    spec.launcher = "deepspeed"
    job_id = manager_for(store).submit(spec, "print('hi')")
    job = api.get_job(job_id, store)
    job.wait(timeout=240)
    shipped = job.dir / CONFIG_FILE
    assert json.loads(shipped.read_text()) == {"train_batch_size": 8}
    (role,) = [Role.from_json(r) for r in job.record.request["roles"]]
    assert role.args == ["--deepspeed", "--deepspeed_config", str(shipped)]
    assert role.env["MPLBACKEND"] == "Agg"
    assert role.env["TORCH_EXTENSIONS_DIR"].endswith("/jupyter_disttrain/torch_extensions")
    agent_env = job.record.request["agents"][0]["env"]
    assert agent_env["MPLBACKEND"] == "Agg"


def test_ds_config_option_adds_the_deepspeed_flags(tmp_path: Path) -> None:
    (tmp_path / "cfg.json").write_text("{}")
    spec = _spec(tmp_path, "--ds-config", "cfg.json")
    ctx = LaunchContext("/jobs/j1", cpu=True, cache_dir="/cache")
    (role,) = get_launcher("deepspeed").roles(spec, ctx)
    assert role.args == ["--deepspeed", "--deepspeed_config", "/jobs/j1/ds_config.json"]
    (tmp_path / "d").write_text("{}")
    spec.args = ["--deepspeed_config=d"]  # the name is no part of the flag's own letters
    (role,) = get_launcher("deepspeed").roles(spec, ctx)
    assert role.args == ["--deepspeed_config=/jobs/j1/ds_config.json"]
    assert get_launcher("deepspeed").side_files(spec, local=True) == {"ds_config.json": b"{}"}


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("{'train_batch_size': 8}", "DeepSpeed config 'ds.json' is not valid JSON: Expecting property name"),
        ("[1, 2]", "must be a JSON object, not list"),
        (None, "No such file or directory"),
    ],
)
def test_a_bad_deepspeed_config_is_one_line_and_nothing_runs(
    store: JobStore, tmp_path: Path, content: str | None, error: str
) -> None:
    if content is not None:
        (tmp_path / "ds.json").write_text(content)
    spec = _spec(tmp_path, "--ds-config", "ds.json", "--accelerator", "cpu")
    with pytest.raises(InvalidSpecError, match=error) as caught:
        manager_for(store).submit(spec, "print('hi')")
    assert "\n" not in str(caught.value)
    assert store.records() == []


def test_a_deepspeed_job_without_deepspeed_installed_is_refused(
    store: JobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # how Python blocks an import
    spec = _spec(tmp_path, "--launcher", "deepspeed", "--accelerator", "cpu")
    with pytest.raises(InvalidSpecError, match=r"uses DeepSpeed, which is not installed here: pip install"):
        manager_for(store).submit(spec, "print('hi')")
    assert store.records() == []
