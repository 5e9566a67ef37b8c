"""A rank's traceback as the notebook's own error: cells and lines, not the packaged script.

A failing rank prints Python's traceback to its log: ``<frozen runpy>`` and the rank wrapper's
frames first, then ``train.py, line 34``. ``read_traceback`` finds the last traceback in a log's
lines (chained ones included, rank prefixes dropped); ``map_frames`` names the script's lines by
the cell and line they came from (the packaging's line map, ``packaging/origins.py``) and drops
the product's own frames (library frames stay); ``render`` writes it as IPython writes a cell's
error (``Cell In[3], line 9``, the source lines around it, ANSI colours). A stack dump of a
running rank (faulthandler's or py-spy's) gets the same mapping and folding (``map_stack``).

Pure text: the job layer reads the log, the script and the line map and hands them in.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

TRACEBACK_START = "Traceback (most recent call last):"
_CHAINS = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)
_PREFIX = re.compile(r"^(?:\[(?:rank|default)\d+\]:? ?)+")  # torch's "[rank1]:" (once or more)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<name>.+))?$')
# faulthandler: `  File "/x/train.py", line 9 in f`; py-spy: `    f (train.py:9)`
_DUMP_FRAME = re.compile(r'^(?P<indent>\s*)File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<name>.+)$')
_SPY_FRAME = re.compile(r"^(?P<indent>\s+)(?P<name>\S.*) \((?P<file>[^():]+):(?P<line>\d+)\)$")
_CARETS = re.compile(r"^\s*[~^]+\s*$")
# Frames of the product's own machinery (how a rank starts), never the user's or a library's.
_PRODUCT = re.compile(
    r"(^<frozen runpy>$|(^|/)runpy\.py$|jupyter_disttrain/runtime/|jupyter_disttrain/backends/"
    r"|disttrain_runtime/)"  # (the runtime a pod runs, shipped with the job: podruntime.py)
)
# What a rank raises when a peer left or its launcher stopped it, not an error of its own:
# torch.distributed's store and network errors, gloo's and NCCL's words for a peer gone (in a
# RuntimeError or a DistBackendError), a socket's, and the interrupts with which a rank is stopped
# (Lightning's SIGTERMException). An error type or message seen in any exception of the chain.
_PEER_LOSS_TYPE = re.compile(
    r"(^|\.)(DistNetworkError|DistStoreError|ConnectionResetError|ConnectionAbortedError|BrokenPipeError"
    r"|KeyboardInterrupt|SIGTERMException|HorovodInternalError)$"
)
_PEER_LOSS_WORDS = re.compile(
    r"connection (closed|reset) by peer|broken pipe|connection refused|timed out|timeout"
    r"|remote process exited|communicator was aborted|failed to recv",
    re.IGNORECASE,
)
# The packaging's line map in the job dir (``packaging/origins.py`` writes it, ``LineMap`` reads it).
ORIGINS_FILE = "origins.json"
CONTEXT_BEFORE = 2  # source lines shown before a frame's line, as IPython shows a few
MAX_MESSAGE_LINES = 20  # of an exception's message

RED, GREEN, CYAN, BOLD, RESET = "\x1b[31m", "\x1b[32m", "\x1b[36m", "\x1b[1m", "\x1b[0m"
RULE = "-" * 75


@dataclass
class Frame:
    """One frame: where Python says it was, and where the user wrote it (``cell``: ``In [3]``)."""

    file: str
    line: int
    name: str
    source: str = ""
    cell: str | None = None
    cell_line: int | None = None
    context: list[tuple[int, str]] = field(default_factory=list)  # (line number, text)


@dataclass
class Section:
    """One exception of a chain: its frames (the product's dropped), its type and message, and the
    sentence that links it to the one before (empty for the first)."""

    frames: list[Frame]
    exception: str
    message: str
    link: str = ""
    hidden: int = 0  # the product's frames left out


@dataclass
class Traceback:
    sections: list[Section]
    raw: list[str]  # the lines as the log has them (prefixes dropped)

    @property
    def last(self) -> Section:
        return self.sections[-1]

    def user_frame(self) -> Frame | None:
        """The innermost frame in a cell: where the user's code failed."""
        return next((f for f in reversed(self.last.frames) if f.cell), None)


def plain(text: str) -> str:
    """``render``'s text without its colours (for a terminal's log, a text-only front end)."""
    return _ANSI.sub("", text)


def clean(line: str) -> str:
    """A log line without ANSI codes, line ending and torch's ``[rankN]:`` prefixes."""
    return _PREFIX.sub("", _ANSI.sub("", line).rstrip("\r\n"))


def read_traceback(lines: Sequence[str]) -> Traceback | None:
    """The last traceback in ``lines`` (with the exceptions chained before it), or None."""
    text = [clean(line) for line in lines]
    starts = [i for i, line in enumerate(text) if line.strip() == TRACEBACK_START]
    if not starts:
        return None
    first = starts[-1]
    # walk back over chained tracebacks: "The above exception..." sits just before a start
    for start in reversed(starts[:-1]):
        between = [line.strip() for line in text[start:first] if line.strip()]
        if not any(line in _CHAINS for line in between[-1:]):
            break
        first = start
    sections, i = [], first
    link = ""
    while i < len(text):
        section, i = _section(text, i + 1, link)
        sections.append(section)
        link, i = _next_link(text, i)
        if not link:
            break
    return Traceback(sections, text[first:i])


def _section(text: list[str], i: int, link: str) -> tuple[Section, int]:
    frames: list[Frame] = []
    while i < len(text):
        m = _FRAME.match(text[i])
        if m is None:
            if text[i].startswith(" ") and frames and not _CARETS.match(text[i]) and not frames[-1].source:
                frames[-1].source = text[i].strip()
            elif not text[i].startswith(" ") and text[i].strip():
                break
            i += 1
            continue
        frames.append(Frame(m["file"], int(m["line"]), (m["name"] or "").strip()))
        i += 1
    head = text[i] if i < len(text) else ""
    exception, _, message = head.partition(": ")
    i += 1
    more: list[str] = []
    while (
        i < len(text) and text[i].strip() and text[i].strip() not in _CHAINS and len(more) < MAX_MESSAGE_LINES
    ):
        if text[i].strip() == TRACEBACK_START:
            break
        more.append(text[i])
        i += 1
    return Section(frames, exception.strip(), "\n".join([message, *more]).strip(), link), i


def _next_link(text: list[str], i: int) -> tuple[str, int]:
    """The chain sentence after a section and the index of the next section's start, if any."""
    j = i
    while j < len(text) and not text[j].strip():
        j += 1
    if j < len(text) and text[j].strip() in _CHAINS:
        link = text[j].strip()
        k = j + 1
        while k < len(text) and text[k].strip() != TRACEBACK_START:
            if text[k].strip():
                return "", i
            k += 1
        if k < len(text):
            return link, k
    return "", i


@dataclass
class LineMap:
    """The packaging's line map (``origins.json``) and the script it describes. The map holds
    numbers only: a cell line's text is the script line's (``text``), where the map says it is."""

    script_name: str
    script: list[str]
    cells: list[tuple[str, int]]  # (label, number of the first line)
    lines: dict[int, tuple[int, int]]  # script line -> (cell index, cell line)
    shown: dict[tuple[int, int], str] = field(default_factory=dict)  # (cell, line) -> its text

    @classmethod
    def of(cls, script_name: str, script: str, origins: dict[str, Any] | None) -> LineMap:
        """From the script and ``origins.json``'s JSON (None or malformed: nothing maps)."""
        text = script.split("\n")
        cells: list[tuple[str, int]] = []
        lines: dict[int, tuple[int, int]] = {}
        shown: dict[tuple[int, int], str] = {}
        try:
            for cell in (origins or {}).get("cells", []):
                cells.append((str(cell["label"]), int(cell["first"])))
            for at, index, line, *where in (origins or {}).get("lines", []):
                at, index, line = int(at), int(index), int(line)
                if 0 <= index < len(cells) and 1 <= at <= len(text):
                    lines[at] = (index, line)
                    shown.setdefault((index, line), _cell_text(text[at - 1], where))
        except (TypeError, ValueError, KeyError):
            cells, lines, shown = [], {}, {}
        return cls(script_name, text, cells, lines, shown)

    def is_script(self, file: str, line: int, source: str | None) -> bool:
        """The frame is in the packaged script: its name, and (where the frame shows it) its text."""
        if file.rsplit("/", 1)[-1] != self.script_name or not 1 <= line <= len(self.script):
            return False
        return source is None or not source or self.script[line - 1].strip() == source.strip()

    def place(self, frame: Frame, *, known_source: bool = True) -> None:
        """Name ``frame`` by its cell and line, with the lines before it, when it is the script's."""
        if not self.is_script(frame.file, frame.line, frame.source if known_source else None):
            return
        if frame.line not in self.lines:
            frame.source = frame.source or self.script[frame.line - 1].strip()
            return
        index, line = self.lines[frame.line]
        label, first = self.cells[index]
        frame.cell, frame.cell_line = label, line
        frame.source = self.shown[index, line].strip() or frame.source
        frame.context = [
            (k, self.shown[index, k])
            for k in range(max(first, line - CONTEXT_BEFORE), line + 1)
            if (index, k) in self.shown
        ]


def _cell_text(script_line: str, where: list[Any]) -> str:
    """A cell line's text from its script line: ``where`` is (the cell's indentation of it, the
    length of its text), else (an older map) the script line as it is."""
    if len(where) != 2:
        return script_line.rstrip()
    indent, length = int(where[0]), int(where[1])
    return " " * max(0, indent) + script_line.lstrip()[: max(0, length)]


def is_product(file: str) -> bool:
    return bool(_PRODUCT.search(file))


def map_frames(tb: Traceback, where: LineMap) -> Traceback:
    """Name the script's frames by their cells and drop the product's frames (in place)."""
    for section in tb.sections:
        kept = [f for f in section.frames if not is_product(f.file)]
        section.hidden = len(section.frames) - len(kept)
        section.frames = kept
        for frame in kept:
            where.place(frame)
    return tb


def lost_peer(tb: Traceback) -> bool:
    """Whether the error is one of losing a peer (or of being stopped), not the rank's own."""
    return any(
        _PEER_LOSS_TYPE.search(s.exception) or _PEER_LOSS_WORDS.search(s.message.split("\n", 1)[0])
        for s in tb.sections
    )


def headline(tb: Traceback) -> str:
    """``ValueError: bad lr (In [3], line 9)``: the exception and where the user's code raised it."""
    last = tb.last
    text = last.exception + (f": {last.message.splitlines()[0]}" if last.message else "")
    frame = tb.user_frame()
    if frame is not None:
        text += f" ({frame.cell}, line {frame.cell_line})"
    return text


def _cell_name(label: str) -> str:
    """``In [3]`` as IPython names it in a traceback: ``In[3]``."""
    return label.replace(" ", "")


def _numbered(number: int, text: str, focus: bool, colour: bool) -> str:
    digits = str(number)
    if focus:
        mark = "-" * max(1, 5 - len(digits)) + "> " + digits
        return f"{GREEN}{mark}{RESET} {BOLD}{text}{RESET}" if colour else f"{mark} {text}"
    pad = digits.rjust(7)
    return f"{GREEN}{pad}{RESET} {text}" if colour else f"{pad} {text}"


def _frame_lines(frame: Frame, colour: bool) -> list[str]:
    c = (lambda code, s: f"{code}{s}{RESET}") if colour else (lambda _code, s: s)
    if frame.cell:
        where = c(GREEN, f"Cell {_cell_name(frame.cell)}, line {frame.cell_line}")
        if frame.name and frame.name != "<module>":
            where += f", in {c(CYAN, frame.name)}()"
        body = [_numbered(n, t, n == frame.cell_line, colour) for n, t in frame.context]
    else:
        where = c(GREEN, f"File {frame.file}:{frame.line}") + f", in {c(CYAN, frame.name)}()"
        body = [_numbered(frame.line, frame.source, True, colour)] if frame.source else []
    return [where, *body, ""]


def render(tb: Traceback, *, colour: bool = True) -> list[str]:
    """The traceback as IPython shows a cell's error: a rule, the exception and "Traceback (most
    recent call last)", each frame with its source, the exception again with its message."""
    c = (lambda code, s: f"{code}{s}{RESET}") if colour else (lambda _code, s: s)
    out: list[str] = []
    for section in tb.sections:
        if section.link:
            out += ["", section.link, ""]
        out += [
            c(RED, RULE),
            c(RED, section.exception.ljust(41)) + " Traceback (most recent call last)",
        ]
        for frame in section.frames:
            out += _frame_lines(frame, colour)
        out.append(c(RED, section.exception) + (f": {section.message}" if section.message else ""))
    return out


def map_stack(text: str, where: LineMap) -> str:
    """A stack dump (faulthandler's or py-spy's) with the script's lines named by their cells and
    the product's frames folded into one line per run of them."""
    out: list[str] = []
    folded = 0
    for line in text.split("\n"):
        m = _DUMP_FRAME.match(line) or _SPY_FRAME.match(line)
        if m is None:
            if folded:
                out.append(f"{' ' * 4}… {folded} frame(s) of jupyter_disttrain and runpy hidden")
                folded = 0
            out.append(line)
            continue
        if is_product(m["file"]):
            folded += 1
            continue
        frame = Frame(m["file"], int(m["line"]), m["name"].strip())
        where.place(frame, known_source=False)
        if frame.cell:
            out.append(f"{m['indent']}Cell {_cell_name(frame.cell)}, line {frame.cell_line}, in {frame.name}")
            out.append(f"{m['indent']}    {frame.source}")
        else:
            out.append(line)
    if folded:
        out.append(f"    … {folded} frame(s) of jupyter_disttrain and runpy hidden")
    return "\n".join(out)


def stack_threads(text: str) -> list[list[Frame]]:
    """Each thread's frames in a stack dump (faulthandler's or py-spy's), innermost first as both
    print them; the product's frames left out."""
    threads: list[list[Frame]] = []
    for line in text.split("\n"):
        m = _DUMP_FRAME.match(line) or _SPY_FRAME.match(line)
        if m is None:
            if line.strip() and not line.startswith(" "):  # a thread's heading
                threads.append([])
            continue
        if not threads:
            threads.append([])
        if not is_product(m["file"]):
            threads[-1].append(Frame(m["file"], int(m["line"]), m["name"].strip()))
    return [t for t in threads if t]
