"""The debugger's part of the cell view (notebook/debug.py): the widget's transcript and input, the
other ranks' chips waiting, the text view's note; and the input's contract with the lab."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jupyter_disttrain.jobs.debug import Prompt
from jupyter_disttrain.model.specs import JobPhase, JobStatus, ReplicaStatus
from jupyter_disttrain.notebook import contract, debug, textview, widgets

LAB = Path(__file__).resolve().parents[1] / "labextension"


def _running() -> JobStatus:
    replicas = [ReplicaStatus(name=f"rank-{i}", index=i, phase=JobPhase.RUNNING) for i in range(3)]
    return JobStatus(job_id="pdb-k3x9q", phase=JobPhase.RUNNING, replicas=replicas)


def test_the_widget_shows_the_prompt_and_the_other_ranks_wait_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(widgets.VIEW_ENV, "widget")
    view = widgets.make_view("pdb-k3x9q", "/nonexistent", lambda: None)
    assert isinstance(view, widgets.WidgetView)
    view.update(_running())
    prompt = Prompt("rank-1", "In [3], line 9", "rank-1")
    view.prompt("rank-1", prompt, "")
    panel = view._debug
    assert panel is not None and panel.widget in view.widget.children
    field = panel.input.value
    assert f'class="{contract.DEBUG_INPUT_CLASS} jp-mod-styled"' in field
    assert 'data-disttrain-job="pdb-k3x9q" data-disttrain-replica="rank-1"' in field
    assert "rank-1 waits in the debugger at In [3], line 9" in panel.transcript.value
    chips = view.chips.value
    assert chips.count("waiting for rank-1&#x27;s debugger") == 2  # rank-0 and rank-2, not rank-1
    assert "rank-1 waits in the debugger at In [3], line 9" in view.text()
    # The transcript grows; the input is not made again (what is being typed stays).
    view.prompt("rank-1", prompt, "> In [3], line 9\n(Pdb) p x\n<41>\n(Pdb) ")
    assert "&lt;41&gt;" in panel.transcript.value and panel.input.value is field
    view.prompt("rank-1", None, "")
    assert panel.input.value == "" and "rank-1 left the debugger" in panel.transcript.value
    assert "waiting for" not in view.chips.value and "waits in the debugger" not in view.text()


def test_the_text_view_says_the_others_wait() -> None:
    import io

    out = io.StringIO()
    view = textview.TextView("pdb-k3x9q", "pdb", stream=out)
    view.prompt("rank-1", Prompt("rank-1", "In [3], line 9", "rank-1"), "")
    assert out.getvalue() == "rank-1 waits in the debugger at In [3], line 9; the other ranks wait for it\n"


def test_the_input_and_the_lab_declare_the_same_contract() -> None:
    text = (LAB / "cellcontract.ts").read_text(encoding="utf-8")
    declared = dict(re.findall(r"(\w+) = '([^']*)'", text))
    assert declared["CELL_DEBUG_INPUT_CLASS"] == contract.DEBUG_INPUT_CLASS
    assert declared["CELL_REPLICA_ATTRIBUTE"] == contract.REPLICA_ATTRIBUTE
    assert declared["CELL_JOB_ATTRIBUTE"] == contract.JOB_ATTRIBUTE


def test_the_widget_shows_one_prompt_at_a_time_then_the_next(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Every rank stopped at an unguarded breakpoint(): the widget shows the oldest prompt, and
    when it goes on, the next (a job recorded in a real store; its ranks are not running here, so
    only the transcripts they left are read)."""
    from jupyter_disttrain.api import Job
    from jupyter_disttrain.model.specs import JobSpec, LogLine
    from jupyter_disttrain.storage.store import JobRecord, JobStore

    store = JobStore(tmp_path / "jobs")
    store.create(JobRecord(id="pdb-k3x9q", spec=JobSpec(nproc_per_node=2)), "breakpoint()\n")
    for rank in (0, 1):
        (store.job_dir("pdb-k3x9q") / "debug").mkdir(exist_ok=True)
        (store.job_dir("pdb-k3x9q") / "debug" / f"rank-{rank}.txt").write_text(f"> rank {rank} here\n(Pdb) ")
    monkeypatch.setenv(widgets.VIEW_ENV, "widget")
    view = widgets.make_view("pdb-k3x9q", "/nonexistent", lambda: None)
    assert isinstance(view, widgets.WidgetView)
    feed = debug.PromptFeed(Job("pdb-k3x9q", store), view, text=False)

    def line(rank: int, text: str) -> LogLine:
        return LogLine(text, f"rank-{rank}", "0", rank)

    stopped = [line(r, f"[disttrain] rank-{r} waits in the debugger at train.py:1") for r in (0, 1)]
    feed.poll(stopped, _running())
    assert "rank 0 here" in view._debug.transcript.value and 'replica="rank-0"' in view._debug.input.value
    feed.poll([line(0, "[disttrain] rank-0 left the debugger")], _running())
    assert "rank 1 here" in view._debug.transcript.value and 'replica="rank-1"' in view._debug.input.value
    feed.poll([line(1, "[disttrain] rank-1 left the debugger")], _running())
    assert view._debug.input.value == "" and "rank-1 left the debugger" in view._debug.transcript.value
