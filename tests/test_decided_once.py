"""What a job is decided in one place and read from there (issue 35, item 4).

The defaults are JobSpec's (the flags and the Python API take theirs from it); the CPU/GPU choice
of a local job is ``devices.job_gpus`` (the dry run and the checks before launch ask it); the
dry run carries the side files and the roles that the magic shows and follows.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.local.backend import LocalBackend
from jupyter_disttrain.backends.local.devices import job_gpus
from jupyter_disttrain.jobs.intake import job_flag_classes, spec_from_flags, spec_from_words
from jupyter_disttrain.launchers.base import process_replicas, recorded_roles
from jupyter_disttrain.launchers.horovod import ENTRY_FILE
from jupyter_disttrain.model.flags import add_flags
from jupyter_disttrain.model.specs import JobSpec
from jupyter_disttrain.storage.store import JobStore


def test_the_flags_and_the_python_api_default_to_the_specs_defaults(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser.add_argument, job_flag_classes())
    from_flags = spec_from_flags(parser.parse_args([]), [], default_name=JobSpec.name)
    from_words = spec_from_words()
    plain = JobSpec(backend=from_words.backend, working_dir=from_words.working_dir)
    assert dataclasses.asdict(from_flags) == dataclasses.asdict(from_words) == dataclasses.asdict(plain)


@pytest.mark.parametrize(
    ("visible", "accelerator", "device", "no_gpu"),
    [
        ("0,1", "auto", "cuda", None),
        ("0,1", "cpu", "cpu", "--accelerator cpu"),
        ("", "auto", "cpu", "no GPU is visible on this machine"),
    ],
)
def test_the_dry_run_and_the_checks_ask_one_gpu_choice(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    visible: str,
    accelerator: str,
    device: str,
    no_gpu: str | None,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    spec = JobSpec(name="dev", nproc_per_node=2, accelerator=accelerator)
    request = LocalBackend(JobStore(tmp_path / "jobs")).dryrun(spec, script="print(1)\n").request
    assert (request.to_json()["device"], job_gpus(accelerator) or None) == (
        device,
        visible.split(",") if device == "cuda" else None,
    )
    assert api.job_target(spec).no_gpu == no_gpu


def test_the_dry_run_carries_the_side_files_and_the_roles(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs")
    spec = JobSpec(
        name="hvd", backend="kubernetes", launcher="horovod", image="img", options={"flavor": "job"}
    )
    info = KubernetesBackend(store).dryrun(spec, script="print(1)\n")
    assert list(info.side_files) == [ENTRY_FILE]  # what the magic lists, from the launcher
    assert "side_files" not in info.to_json()  # the REST answer is the request
    ps = JobSpec(
        name="ps", launcher="mxnet", launcher_options={"servers": 1, "workers": 2}, accelerator="cpu"
    )
    request = LocalBackend(store).dryrun(ps, script="print(1)\n").request.to_json()
    assert process_replicas(recorded_roles(ps, request["roles"])) == {
        "scheduler",
        "server-0",
        "worker-0",
        "worker-1",
    }
    assert process_replicas(recorded_roles(JobSpec(nproc_per_node=2), [])) == set()  # ranks: their agent's
