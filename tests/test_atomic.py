"""The one atomic JSON writer (``runtime/atomic.py``) of the store, the launcher, the rank wrapper and em."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.runtime.atomic import write_json
from jupyter_disttrain.storage.store import JobStore


def test_a_write_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "new" / "record.json"  # its directory is made
    write_json(path, {"a": 1})
    write_json(path, {"b": [1, 2]}, default=str)
    assert json.loads(path.read_text()) == {"b": [1, 2]}
    assert [p.name for p in path.parent.iterdir()] == ["record.json"]
    assert path.read_text() == json.dumps({"b": [1, 2]}, indent=1)  # people read these files too


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.mkdir()  # a rename over a directory fails
    (target / "x").write_text("kept")
    with pytest.raises(OSError):
        write_json(target, {"a": 1})
    assert (target / "x").read_text() == "kept"
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]


def test_the_stores_records_are_their_owners_only(store: JobStore) -> None:
    # A spec's env may hold a token: job.json and status.json are not for other users to read.
    job = api.submit("print(1)\n", store=store, gpus=1, env={"TOKEN": "secret"})
    job.wait(timeout=120)
    for name in ("job.json", "status.json", "launcher.json"):
        assert stat.S_IMODE((job.dir / name).stat().st_mode) == 0o600, name
    umask = os.umask(0o22)
    os.umask(umask)
    record = next((job.dir / "ranks").glob("*.json"))  # a rank's record: as open() makes it
    assert stat.S_IMODE(record.stat().st_mode) == 0o666 & ~umask
