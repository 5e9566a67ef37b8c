"""A rank's debugger from the front ends (docs/notebook.md, "Debugging a rank"): which prompts are open, one
exchange with a prompt, its transcript, and ``q``: the whole job cancelled.

A rank that stops in ``breakpoint()`` (or fails under ``--pdb``) says so in its log, and again
when it goes on (``runtime/debugger.py``); ``Prompts`` reads those lines from what a follower
reads anyway, so every backend's prompts are seen the same way. ``exchange`` sends one command
through the job's backend (the rank's Unix socket here, ``srun`` on a Slurm node, ``pods/exec``
on Kubernetes: ``Backend.debug``) and appends both to the transcript in the job dir
(``debug/<replica>.txt``), which the cell's widget shows whoever sent the command (the widget's
input goes through the REST API: the kernel is busy following the job). ``answer_in_text`` is
the text front ends' prompt: the kernel's ``input()`` under a cell, a terminal's under
``jupyter disttrain debug``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..model.errors import DistTrainError, InvalidSpecError
from ..model.specs import LogLine
from ..model.tracebacks import Frame, clean
from ..payloads.jobs import DebugAnswer
from ..runtime import contract
from ..runtime.debugger import LEFT, PROMPT, STOPPED
from .intake import validate_replica

if TYPE_CHECKING:
    from .manager import JobManager

EXCHANGE_TIMEOUT = 60.0  # a command that runs longer (``n`` over a long call): look again later
MAX_LINE = 4096  # of one command
TRANSCRIPT_BYTES = 1024 * 1024  # kept per prompt; past it the transcript stops growing
# The lines of runtime/debugger.py (STOPPED, LEFT), with their blanks as groups.
_OPENED = re.compile(
    re.escape(STOPPED)
    .replace(r"\{replica\}", r"(?P<replica>[\w.-]+)")
    .replace(r"\{where\}", r"(?P<where>\S+)")
)
_LEFT = re.compile(re.escape(LEFT).replace(r"\{replica\}", r"(?P<replica>[\w.-]+)"))


@dataclass
class Prompt:
    """An open prompt: the rank at it, where it stopped, and the log source that said so (a
    Kubernetes pod runs several ranks)."""

    replica: str
    where: str
    source: str


class Prompts:
    """The open prompts of one job, from its output as a follower reads it."""

    def __init__(self) -> None:
        self.open: dict[str, Prompt] = {}

    def feed(self, lines: list[LogLine]) -> tuple[list[Prompt], list[str]]:
        """Take a page's lines; the prompts that opened and the replicas whose prompt closed."""
        opened: list[Prompt] = []
        closed: list[str] = []
        for line in lines:
            text = clean(line.text)
            if (m := _OPENED.match(text)) is not None:
                prompt = Prompt(m["replica"], m["where"], line.replica)
                self.open[prompt.replica] = prompt
                opened.append(prompt)
            elif (m := _LEFT.match(text)) is not None and self.open.pop(m["replica"], None) is not None:
                closed.append(m["replica"])
        return opened, closed

    def ended(self, replicas: set[str]) -> list[str]:
        """Close the prompts of ranks that are no longer running; the replicas closed."""
        gone = [r for r, p in self.open.items() if r in replicas or p.source in replicas]
        for replica in gone:
            del self.open[replica]
        return gone


def is_prompt_line(text: str) -> bool:
    """A line the debugger prints for the front ends (not the job's own output)."""
    line = clean(text)
    return bool(_OPENED.match(line) or _LEFT.match(line))


def exchange(manager: JobManager, job_id: str, replica: str, line: str | None) -> DebugAnswer:
    """Send ``line`` (None: only look) to ``replica``'s prompt; pdb's answer. ``q`` (or
    ``quit``, ``exit``) cancels the whole job: it ends Cancelled, every process stopped."""
    name = validate_replica(replica)
    if name is None:
        raise InvalidSpecError("name the rank whose prompt to answer, e.g. rank-1")
    if line is not None and (len(line) > MAX_LINE or "\n" in line.rstrip("\n")):
        raise InvalidSpecError(f"a debugger command is one line of at most {MAX_LINE} characters")
    request: dict[str, Any] = {"peek": True} if line is None else {"line": line.rstrip("\n")}
    said = manager.backend_of(job_id).debug(job_id, name, request, EXCHANGE_TIMEOUT)
    output = _in_cells(manager, job_id, str(said.get("output", "")))
    answer = DebugAnswer(name, output, bool(said.get("open")), bool(said.get("quit")))
    _transcribe(manager, job_id, name, line, answer)
    if answer.quit:
        manager.cancel(job_id)
    return answer


# pdb's "where it stopped" line: ``> /path/train.py(12)<module>()``.
_STOPPED_AT = re.compile(r"^> (?P<file>\S.*)\((?P<line>\d+)\)(?P<rest>.*)$", re.MULTILINE)


def where_in_cells(manager: JobManager, job_id: str, where: str) -> str:
    """``train.py:30`` (where a prompt opened) as the notebook names it: ``In [8], line 10``."""
    file, _, line = where.rpartition(":")
    if not line.isdigit():
        return where
    from .failure import line_map

    frame = Frame(file, int(line), "")
    line_map(manager.store, manager.store.read_record(job_id)).place(frame, known_source=False)
    return f"{frame.cell}, line {frame.cell_line}" if frame.cell else where


def _in_cells(manager: JobManager, job_id: str, output: str) -> str:
    """pdb's lines naming the packaged script, named by the notebook's cell and line instead
    (``> In [3], line 5 <module>()``), as a failure's traceback is (``jobs/failure.py``)."""
    if "> " not in output:
        return output
    from .failure import line_map

    lines = line_map(manager.store, manager.store.read_record(job_id))

    def named(m: re.Match[str]) -> str:
        frame = Frame(m["file"], int(m["line"]), m["rest"])
        lines.place(frame, known_source=False)
        return f"> {frame.cell}, line {frame.cell_line} {m['rest']}" if frame.cell else m[0]

    return _STOPPED_AT.sub(named, output)


def _transcribe(
    manager: JobManager, job_id: str, replica: str, line: str | None, answer: DebugAnswer
) -> None:
    """Append the command and pdb's answer to the prompt's transcript, as a terminal shows them."""
    path = transcript_path(manager, job_id, replica)
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    if line is None and size:  # a look repeats what is there already
        return
    text = (line.rstrip("\n") + "\n" if line is not None else "") + answer.output
    if answer.quit:
        text += "(the job is being cancelled)\n"
    if size + len(text) > TRANSCRIPT_BYTES:
        return
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(text)
    except OSError:  # the transcript is a view; the exchange itself went through
        pass


def transcript_path(manager: JobManager, job_id: str, replica: str) -> str:
    return os.path.join(manager.store.job_dir(job_id), contract.DEBUG_DIR, f"{replica}.txt")


def transcript(manager: JobManager, job_id: str, replica: str) -> str:
    """What the prompt's transcript holds (at most ``TRANSCRIPT_BYTES``)."""
    from ..storage.safefiles import open_regular

    try:
        with open_regular(transcript_path(manager, job_id, replica)) as f:
            return f.read(TRANSCRIPT_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def answer_in_text(
    manager: JobManager,
    job_id: str,
    prompt: Prompt,
    ask: Callable[[str], str],
    out: Callable[[str], Any],
) -> bool:
    """Answer ``prompt`` from a text front end until pdb goes on (``c``) or the job is cancelled
    (``q``): pdb's output through ``out``, each command from ``ask`` (``input``). False when
    this front end cannot ask (no stdin: nbclient), having said how else to answer."""
    try:
        answer = exchange(manager, job_id, prompt.replica, None)
    except DistTrainError as exc:
        out(f"{prompt.replica}'s debugger: {exc}")
        return True
    while answer.open:
        shown = answer.output.removesuffix(PROMPT)  # ``ask`` shows its own, naming the rank
        if shown.strip():
            out(shown.rstrip("\n"))
        try:
            line = ask(f"(Pdb {prompt.replica}) ")
        except EOFError:
            line = "continue"
        except Exception:  # IPython's StdinNotImplementedError: this front end has no input
            out(
                f"{prompt.replica} waits in the debugger; answer it with `jupyter disttrain debug {job_id} "
                f"--replica {prompt.replica}` in a terminal (it goes on by itself when no one answers)"
            )
            return False
        try:
            answer = exchange(manager, job_id, prompt.replica, line)
        except DistTrainError as exc:
            out(f"{prompt.replica}'s debugger: {exc}")
            return True
    if answer.output.strip():
        out(answer.output.rstrip("\n"))
    if answer.quit:
        out(f"job {job_id} cancelled from {prompt.replica}'s debugger")
    return True
