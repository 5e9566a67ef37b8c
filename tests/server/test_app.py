"""The extension's settings: the store it exports to kernels, and the checks on its config."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError
from traitlets import TraitError

from jupyter_disttrain.server.app import DistTrainApp
from jupyter_disttrain.storage.store import ROOT_ENV


async def test_info_and_the_exported_job_root(jp_fetch: Any, job_root: Path) -> None:
    info = json.loads((await jp_fetch("disttrain", "api", "info")).body)
    assert info["job_root"] == str(job_root.resolve())
    assert info["default_backend"] == "local" and "local" in info["backends"]
    # Kernels and terminals the server starts inherit this, so they submit to the same store.
    assert os.environ[ROOT_ENV] == str(job_root.resolve())
    # the configured root alone is searched, and an empty list says so
    listing = json.loads((await jp_fetch("disttrain", "api", "jobs")).body)
    assert listing == {"jobs": [], "roots": [str(job_root.resolve())]}


async def test_tensorboard_root_without_slash_redirects(jp_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("disttrain", "tensorboard", "_all", follow_redirects=False)
    assert info.value.code == 302
    assert info.value.response is not None
    assert info.value.response.headers["Location"].endswith("/disttrain/tensorboard/_all/")


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["python", "--host", "0.0.0.0"],
        ["python", "--bind_all"],
        ["python", "--port=6006"],
        ["python", "--load_fast=true"],  # the Rust data server listens on a TCP port
        ["python", "--reload_multifile=false"],
    ],
)
def test_tensorboard_command_cannot_move_tensorboard_off_its_socket(command: list[str]) -> None:
    with pytest.raises(TraitError):
        DistTrainApp(tensorboard_command=command)


def test_intervals_and_batches_are_checked() -> None:
    with pytest.raises(TraitError):
        DistTrainApp(tensorboard_reload_interval=0)
    with pytest.raises(TraitError):
        DistTrainApp(log_batch_lines=0)
    with pytest.raises(TraitError):
        DistTrainApp(tensorboard_multifile_inactive_secs=-2)
    assert DistTrainApp(tensorboard_command=["python3", "--samples_per_plugin", "scalars=500"])


async def test_a_tensorboard_that_cannot_start_is_a_clear_502(jp_fetch: Any, jp_serverapp: Any) -> None:
    import sys

    manager = jp_serverapp.web_app.settings["jupyter_disttrain"].tensorboard
    manager.command = [sys.executable, "--no_such_tensorboard_flag"]
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("disttrain", "api", "tensorboard", "_all", method="POST", body="", request_timeout=60)
    assert info.value.code == 502
    assert info.value.response is not None
    message = json.loads(info.value.response.body)["message"]
    assert "no_such_tensorboard_flag" in message
    listed = json.loads((await jp_fetch("disttrain", "api", "tensorboard", "_all")).body)
    assert listed["running"] is False
