"""The live view under a ``%%distrun`` cell: job name, phase, one chip per replica, log tail.

``make_view`` picks the kind of view. In a kernel with ipywidgets it displays a widget; the
same display also carries a plain-text summary (kept up to date through its display id), so
front ends without a widget manager (nbclient, nbconvert, a notebook opened later) still show
where the job stands. Outside a kernel (terminal IPython, scripts) it prints plain text
(``textview.py``: the text view, and the text forms both views share).

The buttons "Open logs in the sidebar" and "Open TensorBoard" are plain HTML buttons carrying
``data-disttrain-command``/``data-disttrain-job``: the lab extension listens for clicks on them
and runs its own commands, so they work in JupyterLab and Notebook 7 without a kernel round
trip. Cancel is a widget button that calls ``cancel`` in the kernel; since ``%%distrun`` keeps
the kernel busy while it follows the job (so the click would wait until the job ends), the lab
extension also recognises it by its classes and cancels through the REST API right away.

Each rank chip also shows the rank's latest CPU %, memory and (where it has one) GPU use, and a
"quiet" mark when the rank has been silent for longer than usual: ``UsageFeed`` reads them
through the job layer (``Job.resources``) at the sampler's pace, not over REST.
"""

from __future__ import annotations

import html
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model.specs import JobPhase, JobStatus, LogLine
from .contract import (
    CANCEL_CLASS,
    COMMAND_ATTRIBUTE,
    DIAGNOSE_COMMAND,
    JOB_ATTRIBUTE,
    JOB_CLASS_PREFIX,
    LOGS_COMMAND,
    TENSORBOARD_COMMAND,
    JobView,
)
from .textview import (
    SUMMARY_LINES,
    TAIL_LINES,
    LogTail,
    TextView,
    by_role,
    chip_text,
    chip_usage,
    failure_lines,
    reason_text,
    replica_note,
    role_label,
    summary,
)

if TYPE_CHECKING:
    from IPython.display import DisplayHandle

    from ..jobs.debug import Prompt
    from ..model.progress import Progress
    from ..payloads.jobs import Failure
    from ..payloads.monitoring import IncidentSummary, Resources


VIEW_ENV = "DISTTRAIN_VIEW"  # "widget" | "text": overrides the automatic choice

_PHASE_COLOURS = {
    JobPhase.PENDING: "var(--jp-warn-color1, #f57c00)",
    JobPhase.RUNNING: "var(--jp-brand-color1, #1976d2)",
    JobPhase.SUCCEEDED: "var(--jp-success-color1, #388e3c)",
    JobPhase.FAILED: "var(--jp-error-color1, #d32f2f)",
    JobPhase.CANCELLED: "var(--jp-layout-color4, #757575)",
}


def make_view(job_id: str, job_dir: str, cancel: Callable[[], None]) -> JobView:
    """Return the view that fits where the code runs.

    Args:
        job_id: The job's id (names it in the sidebar and the REST API).
        job_dir: The job's directory; its ``job.json`` gives the display name.
        cancel: Called (in the kernel) when the user clicks Cancel.

    Returns:
        A ``WidgetView`` inside a kernel with ipywidgets, else a ``TextView``.
        ``DISTTRAIN_VIEW=text|widget`` forces one.
    """
    name = _job_name(job_dir, job_id)
    choice = os.environ.get(VIEW_ENV, "").strip().lower()
    if choice not in ("", "text", "widget"):
        raise ValueError(f"{VIEW_ENV}={choice!r}: set it to 'widget', 'text' or leave it unset")
    if choice == "text" or (choice == "" and not _in_widget_kernel()):
        return TextView(job_id, name)
    return WidgetView(job_id, name, cancel)


def _job_name(job_dir: str, job_id: str) -> str:
    try:
        record = json.loads((Path(job_dir) / "job.json").read_text(encoding="utf-8"))
        return str(record["spec"]["name"])
    except (OSError, ValueError, KeyError, TypeError):
        return job_id


def _in_widget_kernel() -> bool:
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class WidgetView:
    """An ipywidgets view kept live by ``update``/``append``; safe to call from any thread."""

    def __init__(self, job_id: str, name: str, cancel: Callable[[], None]) -> None:
        import ipywidgets as w
        from IPython.display import display

        self.job_id = job_id
        self.name = name
        self._cancel_cb = cancel
        self._status: JobStatus | None = None
        self._tail = LogTail(TAIL_LINES)
        self._text_tail = LogTail(SUMMARY_LINES)
        self._failure: list[str] | None = None
        self._usage: dict[str, str] = {}  # replica -> chip_usage of its latest sample
        self._quiet: set[str] = set()
        self._story: Failure | None = None  # why it failed: the root cause, the peers it stopped
        self._waiting: Prompt | None = None  # a rank at its debugger prompt: the others wait for it
        self._debug: Any = None  # debug.DebugPanel, made when a prompt first opens
        self._lock = threading.RLock()
        self._closed = False

        self.header = w.HTML()
        self.chips = w.HTML()
        self.log = w.HTML(_pre([]))
        self.bar = w.HTML()  # progress and the first metric's sparkline (notebook/progress.py)
        self.cancel_button = w.Button(
            description="Cancel", icon="stop", button_style="danger", tooltip=f"Cancel job {job_id}"
        )
        self.cancel_button.on_click(lambda _b: self._on_cancel())
        # read by the lab extension (job ids are DNS labels, so they are valid class names)
        self.cancel_button.add_class(CANCEL_CLASS)
        self.cancel_button.add_class(JOB_CLASS_PREFIX + job_id)
        self.message = w.HTML()
        self.verdict = w.HTML()  # the newest diagnosis (Diagnose, or the guard's)
        self.links = w.HTML(_lab_buttons(job_id))
        self.widget = w.VBox(
            [
                self.header,
                self.chips,
                self.bar,
                self.log,
                w.HBox([self.cancel_button, self.links]),
                self.message,
                self.verdict,
            ]
        )
        self.widget.add_class("jp-DistTrainCellView")
        self._render()
        first = self._bundle()
        self._sent_text: str = first["text/plain"]
        self._handle: DisplayHandle | None = display(first, raw=True, display_id=True)

    def update(self, status: JobStatus) -> None:
        with self._lock:
            self._status = status
            self._render()
            self._refresh_text()

    def append(self, lines: list[LogLine]) -> None:
        if not lines:
            return
        with self._lock:
            for line in lines:
                self._tail.add(line)
                self._text_tail.add(line)
            self.log.value = _pre(self._tail.lines())

    def failure(self, story: Failure, lines: list[LogLine]) -> None:
        """Show the root cause in place of the mixed tail of all ranks: its headline (the cell's
        error below has its traceback, mapped to the cells) with the raw traceback one click away,
        or its last lines where its log has no traceback."""
        with self._lock:
            self._failure = failure_lines(story, lines)
            self._story = story
            if story.traceback:
                self.log.value = _story_html(story)
            else:
                self.log.value = _pre(self._failure)
            self._render()
            self._refresh_text()

    def usage(self, resources: Resources) -> None:
        """Take the ranks' latest samples and liveness (a ``UsageFeed`` answer) into the chips."""
        with self._lock:
            for name, replica in resources.replicas.items():
                if replica.samples:
                    self._usage[name] = chip_usage(replica.samples[-1])
                if replica.ended:
                    self._usage.pop(name, None)
                if replica.quiet and not replica.ended:
                    self._quiet.add(name)
                else:
                    self._quiet.discard(name)
            self._render()

    def progress(self, found: Progress | None, shown: str) -> None:
        """Show the bar with step/total and ETA, and the sparkline (``shown``: their HTML)."""
        with self._lock:
            self.bar.value = shown

    def diagnosis(self, incident: IncidentSummary) -> None:
        """Show the newest diagnosis's verdict (a Diagnose click, or the stall guard's)."""
        with self._lock:
            self.verdict.value = _verdict_html(incident)

    def prompt(self, replica: str, prompt: Prompt | None, transcript: str) -> None:
        """Show the prompt's transcript and input below the log; the other chips say they wait."""
        from .debug import DebugPanel

        with self._lock:
            if self._debug is None:
                self._debug = DebugPanel(self.job_id)
                self.widget.children = (
                    *self.widget.children[:4],
                    self._debug.widget,
                    *self.widget.children[4:],
                )
            self._debug.show(replica, prompt, transcript)
            self._waiting = prompt
            self._render()
            self._refresh_text()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._ended()
            self._refresh_text()

    def _ended(self) -> None:
        """An ended job has nothing to cancel or diagnose: those buttons go, not just greyed out."""
        self.cancel_button.disabled = True
        self.cancel_button.layout.display = "none"
        self.links.value = _lab_buttons(self.job_id, running=False)

    def text(self) -> str:
        """The plain-text form shown by front ends that cannot render widgets."""
        with self._lock:
            out = [summary(self.name, self.job_id, self._status)]
            groups = by_role(self._status.replicas if self._status else [])
            for role, replicas in groups:
                chips = " ".join(f"[{chip_text(r, self._story)}]" for r in replicas)
                out.append("  " + " ".join(x for x in (role_label(role, len(groups)), chips) if x))
            if self._waiting is not None:
                out.append(f"  {self._waiting.replica} waits in the debugger at {self._waiting.where}")
            out.extend("  " + line for line in (self._failure or self._text_tail.lines()))
            return "\n".join(out)

    def _on_cancel(self) -> None:
        self.cancel_button.disabled = True
        try:
            self._cancel_cb()
            self.message.value = _note("Cancel requested.")
        except Exception as err:  # shown to the user; the job is left as it was
            self.cancel_button.disabled = False
            self.message.value = _note(f"Could not cancel: {err}", error=True)

    def _render(self) -> None:
        status = self._status
        phase = status.phase if status else JobPhase.PENDING
        self.header.value = (
            f'<div style="display:flex;gap:8px;align-items:center">'
            f"<b>{html.escape(self.name)}</b>"
            f'<code style="opacity:.7">{html.escape(self.job_id)}</code>{_badge(phase)}'
            f"{_reason(status)}</div>"
        )
        groups = by_role(status.replicas if status else [])
        self.chips.value = "".join(
            '<div style="display:flex;flex-wrap:wrap;gap:4px 10px;align-items:center">'
            + (f"<span>{html.escape(label)}</span>" if (label := role_label(role, len(groups))) else "")
            + "".join(self._chip(r) for r in replicas)
            + "</div>"
            for role, replicas in groups
        )
        if phase.is_terminal:
            self._ended()

    def _chip(self, replica: Any) -> str:
        """The replica's phase badge, then (while it runs) its usage and a quiet mark. A replica
        that only stopped because the root cause left is "stopped by rank-1", in a quiet colour."""
        if self._story and (cause := self._story.stopped_by(replica.name)):
            note = f"{replica_note(replica)}; {replica.message or 'no error of its own'}"
            chip = _badge(JobPhase.CANCELLED, label=f"{replica.name}: stopped by {cause}", title=note)
            return f'<span class="jp-DistTrain-chipPeer" style="display:inline-flex">{chip}</span>'
        chip = _badge(replica.phase, label=replica.name, title=replica_note(replica))
        if self._story is not None and replica.name == self._story.replica:
            chip = f'<span class="jp-DistTrain-chipCause" style="display:inline-flex">{chip}</span>'

        live = not replica.phase.is_terminal
        usage = self._usage.get(replica.name) if live else None
        if usage:
            chip += (
                '<span class="jp-DistTrain-chipUsage" style="font-size:var(--jp-ui-font-size0,11px);'
                f'color:var(--jp-ui-font-color2,#666)">{html.escape(usage)}</span>'
            )
        if live and replica.name in self._quiet:
            chip += _QUIET
        waiting = self._waiting
        if live and waiting is not None and replica.name not in (waiting.replica, waiting.source):
            chip += _note(f"waiting for {waiting.replica}'s debugger")
        return f'<span style="display:inline-flex;gap:4px;align-items:center">{chip}</span>'

    def _bundle(self) -> dict[str, Any]:
        bundle: dict[str, Any] = dict(self.widget._repr_mimebundle_() or {})
        bundle["text/plain"] = self.text()
        return bundle

    def _refresh_text(self) -> None:
        # The magic polls several times a second: send an update only when the text changed.
        if self._handle is not None:
            bundle = self._bundle()
            if bundle["text/plain"] != self._sent_text:
                self._sent_text = bundle["text/plain"]
                self._handle.update(bundle, raw=True)


def _badge(phase: JobPhase, label: str | None = None, title: str | None = None) -> str:
    text = html.escape(f"{label}: {phase.value}" if label else phase.value)
    tip = f' title="{html.escape(title)}"' if title else ""
    return (
        f'<span{tip} style="border-radius:9px;padding:0 8px;font-size:var(--jp-ui-font-size0,11px);'
        f'color:#fff;background:{_PHASE_COLOURS[phase]}">{text}</span>'
    )


_QUIET = (
    '<span class="jp-DistTrain-chipQuiet" title="No output or progress for much longer than usual" '
    'style="border-radius:9px;padding:0 6px;font-size:var(--jp-ui-font-size0,11px);color:#fff;'
    'background:var(--jp-warn-color1,#f57c00)">quiet</span>'
)


def _reason(status: JobStatus | None) -> str:
    text = reason_text(status) if status else ""
    if status is None or not text:
        return ""
    failed = status.phase is JobPhase.FAILED
    colour = "var(--jp-error-color1,#d32f2f)" if failed else "var(--jp-ui-font-color2,#666)"
    return f'<span style="color:{colour}">{html.escape(text)}</span>'


def _story_html(story: Failure) -> str:
    """The root cause's headline, and its traceback as the rank printed it behind a click."""
    raw = html.escape(story.raw)
    return (
        '<div class="jp-DistTrain-failure" style="margin:4px 0">'
        '<div style="color:var(--jp-error-color1,#d32f2f);font-weight:bold">'
        f"{html.escape(story.headline)}</div>"
        '<details><summary style="cursor:pointer;color:var(--jp-ui-font-color2,#666)">'
        "Full traceback as the rank printed it</summary>"
        f'<pre style="max-height:16em;overflow:auto;margin:4px 0;padding:4px;'
        f'background:var(--jp-layout-color2,#eee);font-size:var(--jp-code-font-size,12px)">{raw}</pre>'
        "</details></div>"
    )


def _pre(lines: list[str]) -> str:
    body = html.escape("\n".join(lines)) if lines else "(no output yet)"
    return (
        '<pre style="max-height:16em;overflow:auto;margin:4px 0;padding:4px;'
        "background:var(--jp-layout-color2,#eee);color:var(--jp-content-font-color1,#000);"
        f'font-size:var(--jp-code-font-size,12px)">{body}</pre>'
    )


def _note(text: str, error: bool = False) -> str:
    colour = "var(--jp-error-color1,#d32f2f)" if error else "var(--jp-ui-font-color2,#666)"
    return f'<span style="color:{colour}">{html.escape(text)}</span>'


def _lab_buttons(job_id: str, running: bool = True) -> str:
    job = html.escape(job_id)
    tip = "Needs the jupyter_disttrain extension in JupyterLab or Notebook 7"
    buttons = [(LOGS_COMMAND, "Open logs in the sidebar"), (TENSORBOARD_COMMAND, "Open TensorBoard")]
    if running:  # which rank is stuck, in which collective, at which cell line
        buttons.append((DIAGNOSE_COMMAND, "Diagnose"))
    return "".join(
        f'<button type="button" class="jupyter-button" style="margin-left:4px" title="{tip}" '
        f'{COMMAND_ATTRIBUTE}="{command}" {JOB_ATTRIBUTE}="{job}">{label}</button>'
        for command, label in buttons
    )


def _verdict_html(incident: IncidentSummary) -> str:
    return (
        '<div class="jp-DistTrainCellView-verdict" style="margin:4px 0;padding:2px 8px;'
        'border-left:3px solid var(--jp-brand-color1,#1976d2);color:var(--jp-ui-font-color0,#000)">'
        f"<b>Diagnosis</b> ({html.escape(incident.trigger)}): {html.escape(incident.verdict)}</div>"
    )
