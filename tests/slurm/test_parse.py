"""Every layout of Slurm's output, recorded (22.05) or built from Slurm's definitions (23.11,
24.11: fixtures/README.md), read into the same ``SlurmJob``s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_disttrain.backends.slurm.parse import (
    SlurmOutputError,
    json_layout,
    parse_sacct_text,
    parse_sbatch,
    parse_scontrol_text,
    parse_squeue_json,
    parse_squeue_text,
    parse_time,
    parse_version,
)

FIXTURES = Path(__file__).parent / "fixtures"
REC = FIXTURES / "slurm-22.05.8"
IDS = json.loads((REC / "jobs.json").read_text())
LATER = [FIXTURES / "slurm-23.11", FIXTURES / "slurm-24.11"]


def test_2205_json_and_text_agree_on_every_job() -> None:
    ids = set(IDS.values())
    text = parse_squeue_text((REC / "squeue_ended.txt").read_text())
    js = parse_squeue_json((REC / "squeue_ended.json").read_text(), ids)
    assert set(text) == set(js) == ids  # squeue --json listed other jobs too: filtered here
    for job_id in ids:
        a, b = text[job_id], js[job_id]
        assert (a.state, a.reason, a.restarts, a.nodes, a.partition) == (
            b.state,
            b.reason,
            b.restarts,
            b.nodes,
            b.partition,
        ), job_id


@pytest.mark.parametrize(
    ("name", "state", "reason"),
    [
        ("completed", "COMPLETED", None),
        ("failed", "FAILED", "NonZeroExitCode"),
        ("cancelled", "CANCELLED", None),
        ("timeout", "TIMEOUT", "TimeLimit"),
        ("node_fail", "NODE_FAIL", "NodeDown"),
        ("preempted", "PREEMPTED", None),
        ("requeued", "PENDING", "BeginTime"),
        ("pending_resources", "PENDING", "Resources"),
        ("pending_priority", "PENDING", "Priority"),
    ],
)
def test_2205_states_and_reasons(name: str, state: str, reason: str | None) -> None:
    job = parse_squeue_text((REC / "squeue_ended.txt").read_text())[IDS[name]]
    assert (job.state, job.reason) == (state, reason)
    shown = parse_scontrol_text((REC / f"scontrol_{name}.txt").read_text())[IDS[name]]
    assert (shown.state, shown.reason) == (state, reason)


def test_2205_exit_codes_restarts_and_limits() -> None:
    js = parse_squeue_json((REC / "squeue_ended.json").read_text())
    failed, cancelled, timeout = js[IDS["failed"]], js[IDS["cancelled"]], js[IDS["timeout"]]
    assert (failed.exit_code, failed.signal) == (3, None)  # wait status 768
    assert (cancelled.exit_code, cancelled.signal) == (0, 15)
    assert timeout.exit_code == 143 and timeout.time_limit == 60
    assert js[IDS["requeued"]].restarts == 1
    shown = parse_scontrol_text((REC / "scontrol_failed.txt").read_text())[IDS["failed"]]
    assert (shown.exit_code, shown.signal) == (3, None)
    running = parse_scontrol_text((REC / "scontrol_running.txt").read_text())
    assert next(iter(running.values())).exit_code is None  # not ended: no exit code yet
    assert parse_scontrol_text((REC / "scontrol_requeued.txt").read_text())[IDS["requeued"]].restarts == 1


def test_the_2205_running_snapshot_has_a_time_limit_in_seconds() -> None:
    job = parse_squeue_text((REC / "squeue_running.txt").read_text())[IDS["timeout"]]
    assert (job.state, job.time_limit, job.nodes, job.batch_host) == ("RUNNING", 60, "dt1", "dt1")


@pytest.mark.parametrize("release", LATER, ids=lambda p: p.name)
def test_later_json_layouts_read_as_their_text(release: Path) -> None:
    data = json.loads((release / "squeue.json").read_text())
    assert json_layout(data) in ("data_parser/v0.0.40", "data_parser/v0.0.42")
    js = parse_squeue_json((release / "squeue.json").read_text())
    text = parse_squeue_text((release / "squeue.txt").read_text())
    assert set(js) == set(text)
    for job_id, job in js.items():
        other = text[job_id]
        assert (job.reason, job.restarts, job.nodes, job.time_limit) == (
            other.reason,
            other.restarts,
            other.nodes,
            other.time_limit,
        ), job_id
        assert job.shown_state == other.shown_state or job.state == other.state, job_id


@pytest.mark.parametrize("release", LATER, ids=lambda p: p.name)
def test_later_layouts_states_flags_and_exit_codes(release: Path) -> None:
    js = parse_squeue_json((release / "squeue.json").read_text())
    assert (js["115"].state, js["115"].flags) == ("TIMEOUT", ("COMPLETING",))  # the base survives
    assert (js["105"].state, js["105"].flags, js["105"].restarts) == ("PENDING", ("REQUEUED",), 1)
    assert (js["109"].exit_code, js["109"].signal) == (3, None)
    assert (js["110"].state, js["110"].signal) == ("CANCELLED", 15)
    assert js["114"].state == "OUT_OF_MEMORY" and js["114"].reason == "OutOfMemory"
    assert js["106"].exit_code is None  # running: status PENDING, no exit yet
    assert js["107"].time_limit is None  # infinite
    assert js["104"].description == "ReqNodeNotAvail, UnavailableNodes:gpu[3-4]"


def test_unknown_layouts_and_garbage_are_errors_not_guesses() -> None:
    with pytest.raises(SlurmOutputError, match="no JSON"):
        parse_squeue_json("squeue: error: ...")
    with pytest.raises(SlurmOutputError, match="job_state"):
        parse_squeue_json(json.dumps({"jobs": [{"job_id": 1}]}))
    with pytest.raises(SlurmOutputError, match="fields"):
        parse_squeue_text("1|RUNNING|None\n")
    with pytest.raises(SlurmOutputError, match="not a job id"):
        parse_sbatch("sbatch: error: Batch job submission failed")


def test_sacct_names_who_cancelled() -> None:
    text = (
        "7|CANCELLED by 1000|0:15|dt1|debug\n7.batch|CANCELLED|0:15|dt1|\n8|OUT_OF_MEMORY|0:125|dt2|debug\n"
    )
    jobs = parse_sacct_text(text)
    assert set(jobs) == {"7", "8"}
    assert (jobs["7"].state, jobs["7"].cancelled_by, jobs["7"].signal) == ("CANCELLED", "1000", 15)
    assert jobs["8"].state == "OUT_OF_MEMORY"


def test_small_things() -> None:
    assert parse_sbatch("123\n") == "123" and parse_sbatch("124;cluster\n") == "124"
    assert parse_version("slurm-wlm 22.05.8\n") == (22, 5, 8)
    assert parse_version("slurm 24.11.5") == (24, 11, 5)
    assert [parse_time(t) for t in ("1:00", "2:00:00", "1-02:03:04", "UNLIMITED")] == [60, 7200, 93784, None]
    assert (REC / "version.txt").read_text().startswith("slurm")
