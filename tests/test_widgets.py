"""The ``%%distrun`` cell view: text view, widget view in-process, and both through a real kernel."""

from __future__ import annotations

import html
import io
import json
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.model.errors import BackendError
from jupyter_disttrain.model.specs import JobPhase, JobStatus, LogLine, ReplicaStatus
from jupyter_disttrain.notebook import textview, widgets
from jupyter_disttrain.payloads.jobs import Failure
from jupyter_disttrain.payloads.monitoring import GpuSample, ReplicaResources, Resources, ResourceSample
from jupyter_disttrain.storage.store import JobStore


def _status(phase: JobPhase, *replica_phases: JobPhase, reason: str | None = None) -> JobStatus:
    replicas = [ReplicaStatus(name=f"rank{i}", index=i, phase=p) for i, p in enumerate(replica_phases)]
    return JobStatus(job_id="mnist-ddp-k3x9q", phase=phase, replicas=replicas, reason=reason)


def _line(text: str, rank: int = 0) -> LogLine:
    return LogLine(text=text, replica=f"rank{rank}", rank=rank, offset="0")


def _story(replica: str = "rank-1", traceback: str = "", peers: list[str] | None = None) -> Failure:
    raw = 'Traceback (most recent call last):\n  File "/x/train.py", line 3, in <module>\nValueError: bad'
    return Failure(
        replica, f"{replica}: ValueError: bad", "ValueError", None, None, traceback, raw, peers or []
    )


def _widget_view(monkeypatch: pytest.MonkeyPatch) -> widgets.WidgetView:
    """The widget view of job j-1, as a kernel with ipywidgets gets it."""
    monkeypatch.setenv(widgets.VIEW_ENV, "widget")
    view = widgets.make_view("j-1", "/nonexistent", lambda: None)
    assert isinstance(view, widgets.WidgetView)
    return view


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_log_tail_collapses_progress_bars_per_replica_and_strips_ansi() -> None:
    tail = textview.LogTail(size=5)
    tail.add(_line("\x1b[32mstart\x1b[0m"))
    for pct in (10, 50, 90):
        tail.add(_line(f"{pct}%|###|\r", rank=0))
        tail.add(_line(f"{pct}%|###|\r", rank=1))
    tail.add(_line("100%|####|"))  # ends rank0's bar: replaces it, then the bar is no longer pending
    tail.add(_line("after", rank=0))
    assert tail.lines() == ["[rank0] start", "[rank0] 100%|####|", "[rank1] 90%|###|", "[rank0] after"]


def test_log_tail_keeps_a_bar_when_only_its_newline_follows() -> None:
    tail = textview.LogTail()
    tail.add(_line("50%\r"))
    tail.add(_line(""))
    tail.add(_line("next"))
    assert tail.lines() == ["[rank0] 50%", "[rank0] next"]


def test_log_tail_keeps_last_segment_of_a_multi_redraw_chunk_and_drops_oldest() -> None:
    tail = textview.LogTail(size=2)
    tail.add(_line("a"))
    tail.add(_line("1%\r2%\r3%\r"))
    tail.add(LogLine(text="hello", replica="worker-0", offset="9"))
    assert tail.lines() == ["[rank0] 3%", "[worker-0] hello"]


def test_text_view_prints_each_phase_change_once_and_the_lines() -> None:
    out = io.StringIO()
    view = textview.TextView("mnist-ddp-k3x9q", "mnist-ddp", stream=out)
    view.update(_status(JobPhase.RUNNING, JobPhase.RUNNING, JobPhase.PENDING))
    view.update(_status(JobPhase.RUNNING, JobPhase.RUNNING, JobPhase.PENDING))
    view.append([_line("epoch 0 loss 1.0"), _line("50%|##\r"), _line("epoch 0 loss 0.9", rank=1)])
    view.update(_status(JobPhase.FAILED, JobPhase.FAILED, JobPhase.SUCCEEDED, reason="OOMKilled"))
    view.close()
    assert out.getvalue().splitlines() == [
        "distrun mnist-ddp (mnist-ddp-k3x9q): Running, 1/2 replicas ready",
        "[rank0] epoch 0 loss 1.0",
        "[rank1] epoch 0 loss 0.9",
        "distrun mnist-ddp (mnist-ddp-k3x9q): Failed - OOMKilled",
    ]


def test_text_view_redraws_progress_in_a_terminal() -> None:
    out = _Tty()
    view = textview.TextView("j-1", "j", stream=out)
    view.append([_line("10%\r"), _line("20%\r"), _line("done")])
    view.close()
    assert out.getvalue() == "\r[rank0] 10%\r[rank0] 20%\r[rank0] done\n"


def test_make_view_outside_a_kernel_is_text_and_reads_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(widgets.VIEW_ENV, raising=False)
    (tmp_path / "job.json").write_text(json.dumps({"spec": {"name": "mnist-ddp"}}))
    view = widgets.make_view("mnist-ddp-k3x9q", str(tmp_path), lambda: None)
    assert isinstance(view, textview.TextView)
    assert view.name == "mnist-ddp"
    # no job.json yet: the id stands in for the name
    assert widgets.make_view("x-1", str(tmp_path / "missing"), lambda: None).name == "x-1"  # type: ignore[attr-defined]


def test_make_view_rejects_an_unknown_view_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(widgets.VIEW_ENV, "fancy")
    with pytest.raises(ValueError, match="set it to 'widget', 'text'"):
        widgets.make_view("x-1", "/nonexistent", lambda: None)


def test_widget_view_tracks_status_lines_and_cancel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(widgets.VIEW_ENV, "widget")
    calls: list[str] = []
    view = widgets.make_view("mnist-ddp-k3x9q", "/nonexistent", lambda: calls.append("cancel"))
    assert isinstance(view, widgets.WidgetView)
    view.update(_status(JobPhase.RUNNING, JobPhase.RUNNING, JobPhase.RUNNING))
    assert "Running" in view.header.value
    assert "rank0: Running" in view.chips.value and "rank1: Running" in view.chips.value
    view.append([_line("<b>not html</b>"), _line("5%\r", rank=1), _line("6%\r", rank=1)])
    assert "&lt;b&gt;not html&lt;/b&gt;" in view.log.value
    assert "[rank1] 6%" in view.log.value and "[rank1] 5%" not in view.log.value
    assert 'data-disttrain-command="disttrain:open-logs"' in view.links.value
    assert 'data-disttrain-job="mnist-ddp-k3x9q"' in view.links.value

    assert set(view.cancel_button._dom_classes) >= {
        "jp-DistTrain-cellCancel",
        "jp-DistTrain-job-mnist-ddp-k3x9q",
    }
    view.cancel_button.click()
    assert calls == ["cancel"] and view.cancel_button.disabled
    assert "Cancel requested" in view.message.value

    view.update(_status(JobPhase.CANCELLED, JobPhase.CANCELLED, JobPhase.CANCELLED, reason="Cancelled"))
    view.close()
    assert view.text().splitlines()[0] == ("distrun mnist-ddp-k3x9q (mnist-ddp-k3x9q): Cancelled - Cancelled")


def test_widget_view_reports_a_failed_cancel_and_allows_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(widgets.VIEW_ENV, "widget")

    def refuse() -> None:
        raise RuntimeError("backend unreachable; try again")

    view = widgets.make_view("j-1", "/nonexistent", refuse)
    view.cancel_button.click()  # type: ignore[attr-defined]
    assert "Could not cancel: backend unreachable" in view.message.value  # type: ignore[attr-defined]
    assert not view.cancel_button.disabled  # type: ignore[attr-defined]


def test_in_a_real_kernel_the_cell_shows_a_widget_with_a_live_text_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nbclient has no widget manager: the saved output must still tell the job's outcome."""
    # the kernel imports this checkout even when the package is not installed
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    monkeypatch.delenv(widgets.VIEW_ENV, raising=False)
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    (tmp_path / "job.json").write_text(json.dumps({"spec": {"name": "mnist-ddp"}}))
    code = textwrap.dedent(
        f"""
        from jupyter_disttrain.notebook.widgets import make_view, WidgetView
        from jupyter_disttrain.model.specs import JobPhase, JobStatus, LogLine, ReplicaStatus
        view = make_view("mnist-ddp-k3x9q", {str(tmp_path)!r}, lambda: None)
        assert isinstance(view, WidgetView), type(view)
        reps = [ReplicaStatus(name=f"rank{{i}}", index=i, phase=JobPhase.RUNNING) for i in range(2)]
        view.update(JobStatus(job_id="mnist-ddp-k3x9q", phase=JobPhase.RUNNING, replicas=reps))
        view.append([LogLine(text=f"step 3 loss 0.5", replica=f"rank{{i}}", rank=i, offset="1")
                     for i in range(2)])
        for r in reps:
            r.phase = JobPhase.SUCCEEDED
        view.update(JobStatus(job_id="mnist-ddp-k3x9q", phase=JobPhase.SUCCEEDED, replicas=reps))
        view.close()
        """
    )
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(code)]
    NotebookClient(
        nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = nb.cells[0].outputs
    assert [o.output_type for o in outputs] == ["display_data"], outputs
    data = outputs[0].data
    assert "application/vnd.jupyter.widget-view+json" in data
    assert data["text/plain"].splitlines() == [
        "distrun mnist-ddp (mnist-ddp-k3x9q): Succeeded",
        "  [rank0: Succeeded] [rank1: Succeeded]",
        "  [rank0] step 3 loss 0.5",
        "  [rank1] step 3 loss 0.5",
    ]
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    values = [m["state"].get("value", "") for m in state.values()]
    assert any("[rank1] step 3 loss 0.5" in v for v in values)


def test_both_views_show_the_root_cause_ranks_last_lines_once_the_job_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    long = "ZeroDivisionError: x" + "y" * 900
    cause = [_line("Traceback (most recent call last):", rank=1), _line(long, rank=1)]
    out = io.StringIO()
    text = textview.TextView("j-1", "j", stream=out)
    text.append([_line("50%|##\r")])  # a bar still pending on screen ends before the summary
    text.failure(_story(), cause)
    assert out.getvalue().splitlines() == [
        "rank-1 failed first; its last lines:",
        "[rank1] Traceback (most recent call last):",
        "[rank1] ZeroDivisionError: x" + "y" * (textview.LINE_CHARS - len("[rank1] ZeroDivisionError: x")),
    ]

    monkeypatch.setenv(widgets.VIEW_ENV, "widget")
    view = widgets.make_view("j-1", "/nonexistent", lambda: None)
    view.append([_line(f"peer line {i}") for i in range(12)])
    view.update(_status(JobPhase.FAILED, JobPhase.FAILED, JobPhase.FAILED, reason="Error"))
    view.failure(_story(), cause)
    assert isinstance(view, widgets.WidgetView)
    shown = view.text().splitlines()
    assert shown[2] == "  rank-1 failed first; its last lines:" and "peer line" not in view.text()
    assert "ZeroDivisionError" in view.log.value and "peer line" not in view.log.value
    view.failure(_story(), [])
    assert view.text().splitlines()[-1] == "  (no output)"


def test_a_mapped_traceback_leaves_the_headline_in_the_widget_and_the_raw_one_a_click_away(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cell's error shows the mapped traceback; the widget says which rank and what, and keeps
    the traceback as the rank printed it behind a <details>. The peer that only stopped because
    rank-1 left is "stopped by rank-1" in the cancelled grey, not failed red; the Cancel button
    of an ended job is gone."""
    monkeypatch.setenv(widgets.VIEW_ENV, "widget")
    view = widgets.make_view("j-1", "/nonexistent", lambda: None)
    status = _status(JobPhase.FAILED, JobPhase.FAILED, JobPhase.FAILED, reason="Error")
    status.replicas = [ReplicaStatus(name=f"rank-{i}", index=i, phase=JobPhase.FAILED) for i in range(2)]
    view.update(status)
    assert view.cancel_button.layout.display == "none"
    view.failure(_story(traceback="Cell In[3], line 9", peers=["rank-0"]), [_line("x", rank=1)])
    assert isinstance(view, widgets.WidgetView)
    assert "rank-1: ValueError: bad" in view.log.value
    assert "<details>" in view.log.value and html.escape('File "/x/train.py", line 3') in view.log.value
    assert "rank-0: stopped by rank-1" in view.chips.value and "jp-DistTrain-chipPeer" in view.chips.value
    assert "jp-DistTrain-chipCause" in view.chips.value and "rank-1: Failed" in view.chips.value


def test_the_text_forms_tell_the_failure_as_the_job_layer_decided_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """What nbclient, papermill and a saved notebook show (issue 34, item 10): the peer as
    "stopped by rank-1", the root cause's error and cell (its traceback, mapped, is the cell's
    error), not the ranks' raw lines."""
    status = _status(JobPhase.FAILED, reason="Error")
    status.replicas = [
        ReplicaStatus(name=f"rank-{i}", index=i, phase=JobPhase.FAILED, exit_code=1, reason="Error")
        for i in range(2)
    ]
    story = _story(traceback="Cell In[3], line 9", peers=["rank-0"])
    story.headline = "rank-1: ValueError: bad (In [3], line 9)"
    raw = [_line('  File "/site/jupyter_disttrain/runtime/worker.py", line 9, in main', rank=1)]
    view = _widget_view(monkeypatch)
    view.update(status)
    view.failure(story, raw)
    assert view.text().splitlines()[1:] == [
        "  [rank-0: stopped by rank-1] [rank-1: Failed, exit 1, Error]",
        "  rank-1 failed first: ValueError: bad (In [3], line 9)",
    ]
    out = io.StringIO()
    textview.TextView("j-1", "j", stream=out).failure(story, raw)
    assert out.getvalue() == "rank-1 failed first: ValueError: bad (In [3], line 9)\n"


def test_a_multi_line_status_message_keeps_the_summary_on_one_line() -> None:
    status = _status(JobPhase.FAILED, JobPhase.FAILED, reason="Error")
    status.message = "rank-1 exited with code 1: ValueError: bad\nTraceback (most recent call last):\n  ..."
    expected = "distrun j (j-1): Failed - Error: rank-1 exited with code 1: ValueError: bad"
    assert textview.summary("j", "j-1", status) == expected


def test_widget_view_groups_replicas_by_role_when_a_job_has_several(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(widgets.VIEW_ENV, "widget")
    view = widgets.make_view("ps-1", "/nonexistent", lambda: None)
    replicas = [
        ReplicaStatus("scheduler-0", "scheduler", 0, JobPhase.RUNNING),
        ReplicaStatus("server-0", "server", 0, JobPhase.RUNNING),
        ReplicaStatus("worker-0", "worker", 0, JobPhase.PENDING),
        ReplicaStatus("worker-1", "worker", 1, JobPhase.PENDING),
    ]
    view.update(JobStatus("ps-1", JobPhase.RUNNING, replicas))  # type: ignore[attr-defined]
    chips = view.chips.value  # type: ignore[attr-defined]
    assert chips.count("<div") == 3 and "<span>server:</span>" in chips
    text = view.text()  # type: ignore[attr-defined]
    assert "  worker: [worker-0: Pending] [worker-1: Pending]" in text.splitlines()
    # One role (a torchrun job): no label, as before roles.
    view.update(_status(JobPhase.RUNNING, JobPhase.RUNNING, JobPhase.RUNNING))  # type: ignore[attr-defined]
    assert "worker:" not in view.chips.value and "worker:" not in view.text()  # type: ignore[attr-defined]


def _sample(t: float, cpu: float = 98.4, rss: int = 312 * 1024**2, **gpu: Any) -> ResourceSample:
    return ResourceSample(t=t, cpu_percent=cpu, rss_bytes=rss, threads=4, read_bytes=0, write_bytes=0, **gpu)


def _resources(now: float, interval: float = 2.0, **replicas: ReplicaResources) -> Resources:
    return Resources(interval=interval, now=now, source="sampler", message=None, replicas=replicas)


def _replica(*samples: ResourceSample, quiet: bool = False, ended: bool = False) -> ReplicaResources:
    return ReplicaResources(
        samples=list(samples), ended=ended, last_output=None, last_progress=None, quiet=quiet
    )


def test_a_chip_shows_cpu_and_memory_and_the_gpu_only_where_there_is_one() -> None:
    assert textview.chip_usage(_sample(1)) == "CPU 98% · 312 MB"
    assert textview.chip_usage(_sample(1, cpu=0.42, rss=1536)) == "CPU 0.4% · 1.50 KB"
    gpus = [GpuSample(index=0, util_percent=70, mem_used_bytes=2 * 1024**3, mem_total_bytes=16 * 1024**3)]
    gpus.append(GpuSample(index=1, util_percent=30, mem_used_bytes=1024**3, mem_total_bytes=16 * 1024**3))
    assert textview.chip_usage(_sample(1, gpus=gpus)) == "CPU 98% · 312 MB · GPU 50% 3.00 GB"
    # the rank's own GPU memory, where the sampler could tell it, over what its devices hold
    assert textview.chip_usage(_sample(1, gpus=gpus, gpu_mem_bytes=512 * 1024**2)).endswith("GPU 50% 512 MB")
    assert textview.chip_usage(_sample(1, gpus=[])) == "CPU 98% · 312 MB"


def test_the_widget_chips_carry_each_ranks_usage_and_quiet_mark_while_it_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    view = _widget_view(monkeypatch)
    running = JobStatus(
        job_id="j-1",
        phase=JobPhase.RUNNING,
        replicas=[ReplicaStatus(name=f"rank-{i}", index=i, phase=JobPhase.RUNNING) for i in range(2)],
    )
    view.update(running)
    view.usage(
        _resources(
            10, **{"rank-0": _replica(_sample(8, cpu=50), _sample(10, cpu=187.6)), "rank-1": _replica()}
        )
    )
    chips = view.chips.value
    assert "CPU 188% · 312 MB" in chips and "CPU 50%" not in chips  # the latest sample
    assert "quiet" not in chips
    view.usage(_resources(12, **{"rank-1": _replica(_sample(12, cpu=0.0), quiet=True)}))
    chips = view.chips.value
    assert "CPU 188%" in chips  # rank-0 keeps its last values until new ones come
    assert "CPU 0% · 312 MB" in chips and chips.count("jp-DistTrain-chipQuiet") == 1
    assert "CPU" not in view.text()  # the saved text stays the stable summary
    running.replicas[0].phase = JobPhase.SUCCEEDED
    view.update(running)
    assert view.chips.value.count("CPU") == 1  # an exited rank shows no usage


def test_the_usage_feed_reads_at_the_samplers_pace_from_the_last_now_and_ends_on_an_error() -> None:
    clock = [100.0]
    asked: list[float | None] = []

    def fetch(since: float | None) -> Resources:
        asked.append(since)
        if len(asked) == 3:
            raise BackendError("the kubernetes backend cannot sample this cluster")
        return _resources(1000.0 + len(asked), interval=5)

    feed = textview.UsageFeed(fetch, clock=lambda: clock[0])
    assert feed.poll() is not None
    assert feed.poll() is None  # not due yet
    clock[0] += 5
    assert feed.poll() is not None
    assert asked == [None, 1001.0]
    clock[0] += 5
    assert feed.poll() is None and feed.stopped == "the kubernetes backend cannot sample this cluster"
    clock[0] += 5
    assert feed.poll() is None and len(asked) == 3


BURN = """
import os
import time
end = time.time() + 90
while os.environ["RANK"] == "0" and time.time() < end:
    sum(range(10000))
time.sleep(max(0.0, end - time.time()))
"""


def test_a_real_jobs_chips_show_the_burning_rank_busy_and_the_sleeping_one_idle(
    store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the job layer, as ``%%distrun`` feeds the widget: each chip shows its rank's latest
    sample; the rank that burns CPU reads busy, the one in ``time.sleep`` idle. (How busy depends
    on the machine's load: on a shared 2-core box a spinning rank gets 20-100 % of a core.)"""
    monkeypatch.setenv(widgets.VIEW_ENV, "widget")
    job = api.submit(BURN, store=store, gpus=2, name="burn")
    try:
        view = widgets.make_view(job.id, str(job.dir), job.cancel)
        assert isinstance(view, widgets.WidgetView)
        feed = textview.UsageFeed(job.resources)
        latest: dict[str, ResourceSample] = {}

        def follow_until(done: Callable[[], bool], seconds: float) -> None:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not done():
                view.update(job.status())
                if (answer := feed.poll()) is not None:
                    view.usage(answer)
                    latest.update({n: r.samples[-1] for n, r in answer.replicas.items() if r.samples})
                time.sleep(0.5)

        follow_until(lambda: len(latest) == 2, 60)
        follow_until(lambda: latest["rank-0"].cpu_percent >= 10, 30)  # past the ranks' start-up
        for name, sample in latest.items():
            assert f"{name}: Running</span>" in view.chips.value
            assert html.escape(textview.chip_usage(sample)) in view.chips.value
        print({n: s.cpu_percent for n, s in latest.items()})
        assert latest["rank-0"].cpu_percent >= 10 and latest["rank-1"].cpu_percent < 5, latest
    finally:
        job.cancel()


def test_the_widget_shows_progress_above_the_log_and_the_text_view_leaves_it_to_the_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jupyter_disttrain.model.progress import Progress
    from jupyter_disttrain.notebook.progress import progress_html

    view, found = _widget_view(monkeypatch), Progress(45, 100, 3.0, "tqdm", "train")
    shown = progress_html(found)
    view.progress(found, shown)
    children = list(view.widget.children)
    assert view.bar.value == shown and children.index(view.bar) < children.index(view.log)
    out = io.StringIO()
    text = textview.TextView("j-1", "j", stream=out)
    text.progress(None, shown)  # tqdm's own bar is in the job's output already
    assert out.getvalue() == ""
