"""A rank's pdb prompt under its ``%%distrun`` cell (docs/notebook.md, "Debugging a rank").

While the cell follows its job, ``PromptFeed`` watches the ranks' lines for a prompt opening
and closing (``jobs/debug.py: Prompts``). Then:

- in the widget, ``DebugPanel`` shows the prompt's transcript and an input; the kernel is busy
  following, so what is typed there goes through the lab extension and the REST API (as Cancel
  does; ``labextension/cellcontract.ts``), and the kernel shows the transcript as it grows;
- in the text view (a terminal IPython, ``DISTTRAIN_VIEW=text``), the kernel asks for each
  command with ``input()``: JupyterLab shows its input box below the cell. A front end without
  stdin (nbclient) is told how else to answer: ``jupyter disttrain debug`` in a terminal.

Meanwhile the other ranks' chips say they wait for the debugged rank.
"""

from __future__ import annotations

import contextlib
import html
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..jobs.debug import Prompt, Prompts, answer_in_text, exchange, is_prompt_line, transcript, where_in_cells
from ..model.errors import DistTrainError
from .contract import DEBUG_INPUT_CLASS, JOB_ATTRIBUTE, REPLICA_ATTRIBUTE

if TYPE_CHECKING:
    from ..api import Job
    from ..model.specs import JobStatus, LogLine
    from .contract import JobView

TRANSCRIPT_LINES = 200  # of a prompt's transcript shown in the widget


class PromptFeed:
    """Prompts of the followed job, shown in ``view`` (a text view answers them from stdin)."""

    def __init__(self, job: Job, view: JobView, text: bool, ask: Callable[[str], str] = input) -> None:
        self.job = job
        self.view = view
        self.text = text
        self.ask = ask
        self.prompts = Prompts()
        self._shown: dict[str, str] = {}  # replica -> the transcript the view has
        self._current: str | None = None  # the prompt the widget shows

    @staticmethod
    def shown(lines: list[LogLine]) -> list[LogLine]:
        """The lines a view shows: not the debugger's own (the prompt says it better)."""
        return [line for line in lines if not is_prompt_line(line.text)]

    def poll(self, lines: list[LogLine], status: JobStatus) -> None:
        opened, closed = self.prompts.feed(lines)
        if status.is_terminal:
            closed += self.prompts.ended(set(self.prompts.open))
        for replica in closed:
            self._shown.pop(replica, None)
            if replica == self._current:
                self._current = None
                self.view.prompt(replica, None, "")
        for prompt in opened:
            self._open(prompt)
        # The widget shows one prompt at a time, the oldest open one (every rank may stop at an
        # unguarded breakpoint()): when it goes on, the next one shows.
        current = next(iter(self.prompts.open.values()), None)
        if not self.text and current is not None:
            self._refresh(current)

    def _open(self, prompt: Prompt) -> None:
        manager = self.job.manager
        prompt.where = where_in_cells(manager, self.job.id, prompt.where)
        if self.text:
            self.view.prompt(prompt.replica, prompt, "")
            answer_in_text(manager, self.job.id, prompt, self.ask, print)
            return
        # what pdb said on stopping, into the transcript the widget shows (a prompt that went on
        # already has its closing line next)
        with contextlib.suppress(DistTrainError):
            exchange(manager, self.job.id, prompt.replica, None)

    def _refresh(self, prompt: Prompt) -> None:
        text = transcript(self.job.manager, self.job.id, prompt.replica)
        if prompt.replica != self._current or text != self._shown.get(prompt.replica):
            self._current = prompt.replica
            self._shown[prompt.replica] = text
            self.view.prompt(prompt.replica, prompt, text)


def panel_html(job_id: str, prompt: Prompt | None, replica: str, text: str) -> tuple[str, str]:
    """(the transcript, the input) of the widget's debugger panel: the input only while the
    prompt is open (it is rendered once per prompt, so typing is never interrupted)."""
    lines = text.splitlines()[-TRANSCRIPT_LINES:] if text else []
    if prompt is None:
        head = f"{replica} left the debugger"
    else:
        head = f"{replica} waits in the debugger at {prompt.where}: c continues, q cancels the whole job"
    shown = html.escape("\n".join(lines)) if lines else "(pdb's answer comes here)"
    transcript_html = (
        '<div class="jp-DistTrain-debug" style="margin:4px 0">'
        f'<div style="color:var(--jp-ui-font-color1);font-weight:bold">{html.escape(head)}</div>'
        '<pre class="jp-DistTrain-debugTranscript" style="max-height:16em;overflow:auto;margin:4px 0;'
        "padding:4px;background:var(--jp-layout-color2,#eee);color:var(--jp-content-font-color1,#000);"
        f'font-size:var(--jp-code-font-size,12px)">{shown}</pre></div>'
    )
    if prompt is None:
        return transcript_html, ""
    input_html = (
        f'<label style="display:flex;gap:6px;align-items:center;font-family:var(--jp-code-font-family)">'
        f"(Pdb {html.escape(replica)})"
        f'<input type="text" class="{DEBUG_INPUT_CLASS} jp-mod-styled" {_contract(job_id, replica)} '
        'autocomplete="off" spellcheck="false" placeholder="a pdb command: p x, n, c, q (Enter)" '
        'title="Needs the jupyter_disttrain extension in JupyterLab or Notebook 7; elsewhere, '
        f'jupyter disttrain debug {html.escape(job_id)} --replica {html.escape(replica)}" '
        'style="flex:1;font-family:var(--jp-code-font-family);font-size:var(--jp-code-font-size,12px)">'
        "</label>"
    )
    return transcript_html, input_html


def _contract(job_id: str, replica: str) -> str:
    return f'{JOB_ATTRIBUTE}="{html.escape(job_id)}" {REPLICA_ATTRIBUTE}="{html.escape(replica)}"'


class DebugPanel:
    """The widget's debugger part: a transcript and, while a prompt is open, its input."""

    def __init__(self, job_id: str) -> None:
        import ipywidgets as w

        self.job_id = job_id
        self.transcript = w.HTML()
        self.input = w.HTML()
        self.widget = w.VBox([self.transcript, self.input])
        self._input_for: str | None = None

    def show(self, replica: str, prompt: Prompt | None, text: str) -> None:
        shown, field = panel_html(self.job_id, prompt, replica, text)
        self.transcript.value = shown
        key = f"{replica}@{prompt.where}" if prompt else None
        if key != self._input_for:  # a new prompt (or none): the input is made afresh, once
            self._input_for = key
            self.input.value = field
