"""The analysis of the ranks' Flight Recorders and the verdict, on a recorded torch 2.13 gloo dump
(``tests/flightrec/``: what a real two-rank job's debug sockets answered) and variations of it."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.model.tracebacks import LineMap
from jupyter_disttrain.monitoring import flightrec, incidents

FIXTURE = json.loads((Path(__file__).parent / "flightrec" / "gloo-2.13-late-rank.json").read_text())


def _answers() -> dict[str, Any]:
    return copy.deepcopy(FIXTURE["raw"])


def _where() -> LineMap:
    return LineMap.of("train.py", FIXTURE["script"], FIXTURE["origins"])


def _diagnose(answers: dict[str, Any], replicas: list[str] | None = None) -> Any:
    incident, _ = incidents.diagnose(
        replicas or FIXTURE["replicas"],
        answers,
        _where(),
        job_id="j",
        trigger="manual",
        started=time.monotonic(),
    )
    return incident


def _dumps(answers: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {int(name[5:]): a["fr"] for name, a in answers.items() if a.get("fr")}


def test_the_stock_analyzer_fails_on_the_recorded_gloo_dump_and_works_with_the_gap_filled() -> None:
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.config_manager import JobConfig

    dumps = _dumps(_answers())
    assert dumps[0]["pg_config"] == {"": {"desc": "", "name": "", "ranks": "[0, 1]"}}  # torch 2.13's gap
    details = {
        f"rank{r}": {
            "host_name": "h",
            "rank": r,
            "entries": d["entries"],
            "version": d["version"],
            "pg_config": d["pg_config"],
        }
        for r, d in dumps.items()
    }
    with pytest.raises(KeyError):
        build_db(copy.deepcopy(details), JobConfig().parse_args([]), dumps[0]["version"])
    assert flightrec.filled(dumps[0], [0, 1])["pg_config"]["0"] == {
        "desc": "default_pg",
        "name": "0",
        "ranks": "[0, 1]",
    }
    analysis = flightrec.analyse(dumps, [0, 1])
    assert analysis.analyzer == "torch" and analysis.notes == []
    (finding,) = analysis.findings
    assert (finding.kind, finding.seq, finding.op, finding.missing, finding.group) == (
        "missing",
        5,
        "all_reduce",
        [1],
        "default group",
    )
    # ours answers the same where torch's cannot run
    (own,) = flightrec.own_findings(dumps, [0, 1])
    assert (own.kind, own.seq, own.op, own.missing, own.source) == (
        "missing",
        5,
        "all_reduce",
        [1],
        "disttrain",
    )
    assert analysis.positions[0].waiting and not analysis.positions[1].waiting


def test_the_recorded_dump_gives_the_recorded_verdict_in_the_notebooks_words() -> None:
    incident = _diagnose(_answers())
    assert incident.verdict == FIXTURE["verdict"]
    assert incident.verdict.startswith(
        "rank-1 has not joined all_reduce #5 (default group); it is at Cell In["
    )
    assert "(`time.sleep(120)`); rank-0 waits in all_reduce at Cell In[" in incident.verdict
    parts = {p.replica: p for p in incident.ranks}
    assert parts["rank-1"].state == "not joined" and parts["rank-1"].source == "time.sleep(120)"
    assert parts["rank-0"].state == "waiting" and parts["rank-0"].source == "dist.all_reduce(t)"
    assert "worker.py" not in (parts["rank-0"].stack or "")  # the product's frames folded
    assert incident.analyzer == "torch"


def _at_seq_5(answers: dict[str, Any], rank: str) -> dict[str, Any]:
    return next(e for e in answers[rank]["fr"]["entries"] if e["collective_seq_id"] == 5)


def test_a_shape_mismatch_and_a_collective_mismatch_are_named() -> None:
    answers = _answers()
    rank1 = answers["rank-1"]["fr"]
    rank1["entries"].append(
        {**_at_seq_5(answers, "rank-0"), "input_sizes": [[2, 2]], "output_sizes": [[2, 2]]}
    )
    incident = _diagnose(answers)
    assert incident.verdict.startswith(
        "all_reduce #5 (default group) was called with different shapes: rank-0 [4], rank-1 [2, 2]"
    )
    assert {p.replica: p.state for p in incident.ranks} == {"rank-0": "mismatch", "rank-1": "mismatch"}
    _at_seq_5(answers, "rank-1")["profiling_name"] = "gloo:broadcast"
    _at_seq_5(answers, "rank-1")["input_sizes"] = [[4]]
    incident = _diagnose(answers)
    assert incident.verdict.startswith(
        "the ranks called different collectives as #5 (default group): rank-0 all_reduce, rank-1 broadcast"
    )
    # the same without torch's analyzer
    (own,) = flightrec.own_findings(_dumps(answers), [0, 1])
    assert (own.kind, own.what) == ("mismatch", "type")


def test_a_rank_that_does_not_answer_is_named_and_the_others_are_still_analysed() -> None:
    answers = _answers()
    answers["rank-1"] = {"fr": None, "stack": None, "errors": {"fr_trace_json": "no answer within 3 s"}}
    incident = _diagnose(answers)
    # without rank 1's record nothing says it has not joined: what is known is said
    assert incident.verdict.startswith("rank-0 waits in all_reduce #5 (default group) at Cell In[")
    assert incident.verdict.endswith(
        "; rank-1 did not answer (no answer within 3 s: blocked in native code holding the GIL, or stopped)"
    )
    assert {p.replica: p.state for p in incident.ranks} == {"rank-0": "waiting", "rank-1": "no answer"}


def test_without_any_flight_recorder_the_stacks_are_said_and_no_rank_is_blamed() -> None:
    stack = FIXTURE["raw"]["rank-1"]["stack"]
    answers = {
        name: {"fr": None, "errors": {}, "stack": stack, "method": "py-spy"} for name in FIXTURE["replicas"]
    }
    incident = _diagnose(answers)
    assert incident.analyzer == "none"
    assert incident.verdict.startswith(
        "no collective record: the ranks have not used torch.distributed; rank-0 is at Cell In["
    )
    assert "rank-1 is at Cell In[" in incident.verdict and "did not answer" not in incident.verdict
    assert "rank-0: stacks by py-spy" in incident.notes


def test_incidents_are_kept_under_names_of_their_own_and_listed_newest_first(tmp_path: Path) -> None:
    first = incidents.keep(tmp_path, _diagnose(_answers()), {"rank-0": {}})
    again = _diagnose(_answers())
    again.time = first.time  # the same moment: still another name
    second = incidents.keep(tmp_path, again, {})
    assert first.name != second.name and second.name == f"{first.name}-2"
    assert [s.name for s in incidents.summaries(tmp_path)] == [second.name, first.name]
    read = incidents.read(tmp_path, first.name)
    assert read is not None and read.verdict == first.verdict and read.ranks == first.ranks
    assert incidents.read(tmp_path, "../job") is None and incidents.read(tmp_path, "nope") is None
    assert json.loads((tmp_path / "incidents" / f"{first.name}.dumps.json").read_text()) == {"rank-0": {}}
