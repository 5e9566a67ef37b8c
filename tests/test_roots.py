"""Jobs are found wherever the user stands: the per-user index of job roots, and the CLI and
server listings that search every indexed root (``--root`` / ``$DISTTRAIN_JOB_ROOT`` narrow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_disttrain.model.specs import JobSpec
from jupyter_disttrain.storage import roots
from jupyter_disttrain.storage.store import ROOT_ENV, JobRecord, JobStore, open_store

SCRIPT = 'print("hello from a job", flush=True)\n'


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``jupyter disttrain ARGS`` as its own process, started in ``cwd``."""
    env = dict(os.environ)
    env.pop(ROOT_ENV, None)
    here = str(Path(__file__).resolve().parent.parent)  # this checkout, from any cwd
    env["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", "jupyter_disttrain.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _make_job(root: Path, name: str) -> str:
    store = JobStore(root)
    record = JobRecord(id=store.new_job_id(name), spec=JobSpec(name=name, backend="local"))
    store.create(record, SCRIPT)
    return record.id


def test_a_job_run_in_one_directory_is_listed_from_another(tmp_path: Path) -> None:
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "hello.py").write_text(SCRIPT)
    run = _cli(project, "run", "hello.py", "--gpus", "2")
    assert run.returncode == 0, run.stderr
    job_id = run.stdout.split()[1]  # "job hello-xxxxx submitted"

    listing = _cli(elsewhere, "list")
    assert listing.returncode == 0, listing.stderr
    assert job_id in listing.stdout and "Succeeded" in listing.stdout
    status = _cli(elsewhere, "status", job_id)
    assert f"{job_id}: Succeeded" in status.stdout
    # --root narrows the search to one root: there is no job there
    narrowed = _cli(elsewhere, "--root", str(elsewhere / "jobs"), "list")
    assert narrowed.stdout.strip().startswith(f"no jobs in {(elsewhere / 'jobs').resolve()};")


def test_empty_answers_say_where_they_looked_and_suggest_terminal_commands(tmp_path: Path) -> None:
    other = tmp_path / "other" / ".disttrain" / "jobs"
    _make_job(other, "elsewhere")
    (tmp_path / "here").mkdir()
    JobStore(other).mark_deleted(JobStore(other).ids()[0])  # listed nowhere, still indexed
    listing = _cli(tmp_path / "here", "list")
    here_root = (tmp_path / "here" / ".disttrain" / "jobs").resolve()
    assert listing.stdout.startswith(f"no jobs in {here_root} or {other.resolve()};")
    assert "jupyter disttrain run" in listing.stdout and "%distrun list" not in listing.stdout
    missing = _cli(tmp_path / "here", "status", "nope-00000")
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        f"jupyter disttrain: no job 'nope-00000' in {here_root} or {other.resolve()}; "
        "`jupyter disttrain list` shows the jobs that exist"
    )


def test_the_environment_root_narrows_the_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    job_a, job_b = _make_job(a, "in-a"), _make_job(b, "in-b")
    monkeypatch.delenv(ROOT_ENV, raising=False)
    assert set(open_store(default=tmp_path / "c").ids()) == {job_a, job_b}
    assert open_store(default=a).job_dir(job_b) == b.resolve() / job_b
    monkeypatch.setenv(ROOT_ENV, str(b))
    assert open_store(default=a).ids() == [job_b]
    assert open_store(str(a)).ids() == [job_a]


def test_the_index_is_recent_first_bounded_and_pruned(
    tmp_path: Path, jupyter_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert roots.index_file() == jupyter_data_dir / "disttrain" / "job-roots.json"
    monkeypatch.setattr(roots, "MAX_ROOTS", 3)
    made = [tmp_path / f"r{i}" for i in range(4)]
    for root in made:
        _make_job(root, "x")
    assert roots.known_roots() == [r.resolve() for r in reversed(made[1:])]  # r0 fell off
    _make_job(made[1], "again")  # used again: first
    assert roots.known_roots()[0] == made[1].resolve()
    for job_dir in made[3].iterdir():
        JobStore(made[3]).purge(job_dir.name)
    made[3].rmdir()
    assert made[3].resolve() not in roots.known_roots()  # gone: not searched
    _make_job(made[0], "x")
    on_disk = json.loads(roots.index_file().read_text())["roots"]
    assert str(made[3].resolve()) not in on_disk and len(on_disk) == 3  # pruned when rewritten


def test_a_bad_index_is_ignored_and_replaced(tmp_path: Path) -> None:
    path = roots.index_file()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"x" * (roots.MAX_INDEX_BYTES + 1))
    assert roots.known_roots() == []
    path.write_text('{"roots": ["relative/path", 3]}')
    assert roots.known_roots() == []
    _make_job(tmp_path / "jobs", "x")
    assert roots.known_roots() == [(tmp_path / "jobs").resolve()]
