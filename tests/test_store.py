"""The job store: ids, atomic records, deletion that keeps files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jupyter_disttrain.model.errors import InvalidSpecError, UnknownJobError
from jupyter_disttrain.model.specs import JobPhase, JobSpec, JobStatus, ReplicaStatus, Volume
from jupyter_disttrain.storage.store import JobRecord, JobStore, default_root


def _create(store: JobStore, name: str = "demo", created: str | None = None) -> str:
    job_id = store.new_job_id(name)
    rec = JobRecord(id=job_id, spec=JobSpec(name=name, nproc_per_node=2))
    if created:
        rec.created = created
    store.create(rec, "print('hi')\n")
    return job_id


def test_records_round_trip_and_list_newest_first(store: JobStore) -> None:
    old = _create(store, "old", "2026-01-01T00:00:00.000Z")
    new = _create(store, "new", "2026-02-01T00:00:00.000Z")
    assert [r.id for r in store.records()] == [new, old]
    rec = store.read_record(old)
    assert rec.spec.nproc_per_node == 2 and store.read_script(old) == "print('hi')\n"
    status = JobStatus(job_id=old, phase=JobPhase.RUNNING, replicas=[ReplicaStatus("rank-0", exit_code=None)])
    store.write_status(status)
    back = store.read_status(old)
    assert back is not None and back.phase is JobPhase.RUNNING and back.replicas[0].name == "rank-0"


def test_spec_round_trip_keeps_volumes_and_options() -> None:
    spec = JobSpec(name="a", volumes=[Volume.parse("data:/mnt/data:ro")], options={"flavor": "job"})
    back = JobSpec.from_dict(spec.to_dict())
    assert back == spec and back.volumes[0].read_only


@pytest.mark.parametrize("bad", ["../etc", "/abs", "a/b", "UPPER", "", "x" * 64, "-lead"])
def test_ids_that_could_escape_the_root_are_refused(store: JobStore, bad: str) -> None:
    with pytest.raises(InvalidSpecError):
        store.job_dir(bad)


def test_unknown_job_says_where_it_looked_and_how_to_find_jobs(store: JobStore) -> None:
    with pytest.raises(UnknownJobError) as info:
        store.read_record("nope-12345")
    assert str(info.value) == (
        f"no job 'nope-12345' in {store.root}; `jupyter disttrain list` shows the jobs that exist"
    )


def test_delete_hides_but_keeps_files_and_purge_removes(store: JobStore) -> None:
    job_id = _create(store)
    store.mark_deleted(job_id)
    assert store.ids() == [] and store.ids(include_deleted=True) == [job_id]
    assert store.read_script(job_id)  # still readable
    store.purge(job_id)
    assert not store.job_dir(job_id).exists()


def test_status_write_is_atomic_no_temp_files_left(store: JobStore) -> None:
    job_id = _create(store)
    for i in range(50):
        store.write_status(JobStatus(job_id=job_id, message=str(i)))
    leftovers = [p for p in os.listdir(store.job_dir(job_id)) if p.endswith(".tmp")]
    assert leftovers == []


def test_default_root_prefers_env_then_an_existing_store_above(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("DISTTRAIN_JOB_ROOT", raising=False)
    (tmp_path / ".disttrain" / "jobs").mkdir(parents=True)
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    assert default_root(sub) == tmp_path / ".disttrain" / "jobs"
    monkeypatch.setenv("DISTTRAIN_JOB_ROOT", str(tmp_path / "elsewhere"))
    assert default_root(sub) == tmp_path / "elsewhere"


@pytest.mark.parametrize("name", ["Bad_Name", "a" * 41, "-x", "x-", "ünï"])
def test_names_must_be_dns_labels(name: str) -> None:
    with pytest.raises(InvalidSpecError, match="DNS-1123"):
        JobSpec(name=name).validate()


def test_fingerprints_change_with_every_write_and_skip_deleted_jobs(store: JobStore) -> None:
    a, b = _create(store, "a"), _create(store, "b")
    first = store.fingerprints()
    assert sorted(first) == sorted([a, b]) == store.ids()
    store.write_status(JobStatus(job_id=a, phase=JobPhase.RUNNING))
    second = store.fingerprints()
    assert second[a] != first[a] and second[b] == first[b]
    store.write_status(JobStatus(job_id=a, phase=JobPhase.SUCCEEDED))
    assert store.fingerprints()[a] not in (first[a], second[a])
    store.write_record(store.read_record(b))
    assert store.fingerprints()[b] != first[b]
    store.mark_deleted(b)
    assert list(store.fingerprints()) == [a]
