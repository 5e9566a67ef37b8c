"""Reading job output from log files: tail, resume from an offset, follow.

A job's output lives in one file per replica (a rank on this machine, a pod on a cluster).
Readers never load a whole file: ``tail`` reads backwards in blocks, ``offset`` seeks, and
``follow`` polls the files for growth. Each ``LogLine`` carries the offset *after* it, so a
reader that stops anywhere can resume with no line lost or repeated.

Lines end at ``\\n``. A progress bar (tqdm) rewrites its line with ``\\r`` and no ``\\n``; such a
pending chunk is handed out once it ends in ``\\r`` (its text keeps the ``\\r``), so viewers can
show the bar move and draw the next chunk over it.

Every read is bounded in bytes as well as in lines: a line longer than ``MAX_LINE`` bytes is
handed out in pieces (at its last ``\\r`` when it has one, else cut with ``CUT_MARKER`` at the
end of the piece), each piece with its own exact offset, so a reader resumes after the piece
and no byte is lost or repeated; and an answer stops once its ``Budget`` is spent.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import os
import re
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..model.errors import InvalidSpecError
from ..model.specs import LogLine, LogRun
from .safefiles import open_regular, regular_files

_BLOCK = 64 * 1024
MAX_LINE = 64 * 1024  # bytes: a longer line is handed out in pieces, so one runaway print cannot eat memory
CUT_MARKER = " \u2026[line cut, continues]"  # ends a piece cut from a longer line
# Bytes of the log one answer (a chunk, a stream event, a poll of the cell view) may cover. The
# answer's JSON is at most ~6x that (one invalid byte becomes "\\ufffd"), under 8 MB.
ANSWER_BYTES = 512 * 1024
_LINE_COST = 24  # what a line costs an answer besides its text (quotes, keys, commas)
_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:")
_RANK_PREFIXES = re.compile(r"^(?:\[rank\d+\]:\s*)+")


class Budget:
    """Bytes an answer may still cover; the first line always fits (it is at most ``MAX_LINE``).

    ``hit`` says the answer stopped for want of bytes (more lines are there already)."""

    def __init__(self, limit: int = ANSWER_BYTES) -> None:
        self.left = limit
        self.used = 0
        self.hit = False

    def take(self, cost: int) -> bool:
        if self.used and cost > self.left:
            self.hit = True
            return False
        self.left -= cost
        self.used += cost
        return True

    def charge(self, cost: int) -> None:
        """Count what is already in the answer (a run's resume token)."""
        self.left -= cost
        self.used += cost

    def fit(self, costs: list[int]) -> int:
        """How many of ``costs``, in order, fit (taking them)."""
        sums = list(itertools.accumulate(costs))
        count = bisect.bisect_right(sums, self.left)
        if count == 0 and not self.used and costs:
            count = 1
        if count < len(costs):
            self.hit = True
        if count:
            self.left -= sums[count - 1]
            self.used += sums[count - 1]
        return count


def log_files(directory: Path) -> list[Path]:
    """The ``*.log`` files of a job's log dir: regular files only, never a link out of the job."""
    return sorted(regular_files(directory, "*.log"))


@dataclass(frozen=True)
class LogSource:
    replica: str
    path: Path
    rank: int | None = None


_RANK_LOG = re.compile(r"rank-(\d+)")


def replica_sources(directory: Path) -> list[LogSource]:
    """The log files of a job dir's ``logs/`` as sources: ranks (``rank-N.log``) in rank order,
    then the others (agents, a parameter server's processes) by name."""
    ranks: list[tuple[int, LogSource]] = []
    others: list[LogSource] = []
    for path in log_files(directory):
        m = _RANK_LOG.fullmatch(path.stem)
        if m:
            ranks.append((int(m.group(1)), LogSource(path.stem, path, int(m.group(1)))))
        else:
            others.append(LogSource(path.stem, path))
    return [s for _, s in sorted(ranks, key=lambda t: t[0])] + sorted(others, key=lambda s: s.replica)


def parse_offset(token: str | int | None, names: list[str]) -> dict[str, int]:
    """Turn a resume token into a byte offset per replica.

    A bare number is the byte offset of the only replica; ``name:123,name2:456`` names each.
    """
    if token is None or token == "":
        return {}
    text = str(token)
    try:
        if ":" not in text:
            value = int(text)
            if value < 0 or len(names) != 1:
                raise ValueError
            return {names[0]: value}
        out: dict[str, int] = {}
        for part in text.split(","):
            name, _, num = part.rpartition(":")
            out[name] = int(num)
            if out[name] < 0:
                raise ValueError
        return out
    except ValueError:
        raise InvalidSpecError(
            f"offset {text!r} is not a resume token; pass back the 'offset' of the last line you got"
        ) from None


def format_offset(offsets: dict[str, int], names: list[str], single: bool = False) -> str:
    """A bare byte offset when one replica was asked for; ``name:offset,...`` for all of them
    (more replicas may appear later, so the token must say whose offset is whose)."""
    if single:
        return str(offsets.get(names[0], 0))
    return ",".join(f"{n}:{offsets.get(n, 0)}" for n in names)


def tail_start(path: Path, lines: int) -> int:
    """Byte offset where the last ``lines`` lines of ``path`` begin.

    Lines end at ``\\n`` and also at ``\\r``, so the last line of a progress bar is its latest
    state; a line longer than ``MAX_LINE`` counts as pieces of that size, so the scan back is
    bounded (``lines`` x ``MAX_LINE`` bytes at most).
    """
    try:
        f = open_regular(path)
    except OSError:
        return 0
    with f:
        size = os.fstat(f.fileno()).st_size
        if lines <= 0 or size == 0:
            return size
        f.seek(max(0, size - 2))
        last = f.read(2)
        # A separator at the very end ends the last line; it does not start another.
        end = size - (2 if last == b"\r\n" else 1 if last[-1:] in (b"\n", b"\r") else 0)
        line_end, pos, count = end, end, 0
        while pos > 0:
            step = min(_BLOCK, pos)
            pos -= step
            f.seek(pos)
            block = f.read(step)
            if pos > 0 and block[:1] == b"\n":  # keep a "\r\n" across blocks together
                f.seek(pos - 1)
                if f.read(1) == b"\r":
                    pos, block = pos - 1, b"\r" + block
            for sep_start, sep_end in itertools.chain(_separators_back(block), [(-1, -1)]):
                # A line longer than a piece: its last pieces count as lines of their own.
                at = pos + sep_end if sep_start >= 0 else None
                while line_end - MAX_LINE > (at if at is not None else pos):
                    line_end -= MAX_LINE
                    count += 1
                    if count == lines:
                        return line_end
                if at is None:
                    break
                count += 1
                if count == lines:
                    return at
                line_end = pos + sep_start
    return 0


def _separators_back(block: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each line separator of ``block`` (``\\r\\n``, ``\\r`` or ``\\n``), the
    last first. Found with ``rfind`` (memrchr), each search going on from the last: a block with
    no separator (a runaway line) costs microseconds, where a regular expression took 1.4 ms."""
    nl, cr = block.rfind(b"\n"), block.rfind(b"\r")
    while nl >= 0 or cr >= 0:
        if nl > cr:
            if cr >= 0 and cr == nl - 1:  # "\r\n" ends one line
                yield cr, nl + 1
                cr = block.rfind(b"\r", 0, cr)
            else:
                yield nl, nl + 1
            nl = block.rfind(b"\n", 0, nl)
        else:
            yield cr, cr + 1
            cr = block.rfind(b"\r", 0, cr)


def last_lines(path: Path, lines: int, max_bytes: int) -> list[str]:
    """The last non-empty lines of a log (at most ``lines`` and ``max_bytes``), read from its end."""
    try:
        with open(path, "rb") as f:
            start = tail_start(path, lines)
            size = os.fstat(f.fileno()).st_size
            f.seek(max(start, size - max_bytes))
            text = f.read(max_bytes).decode("utf-8", "replace")
    except OSError:
        return []
    return [ln.rstrip() for ln in text.splitlines() if ln.strip()][-lines:]


def last_line(path: Path) -> str | None:
    """The last non-empty line of a log (e.g. the exception of a crash), without torch's
    ``[rank1]:`` prefixes: the headline that names the rank has it once already."""
    tail = last_lines(path, 5, 64 * 1024)
    return _RANK_PREFIXES.sub("", tail[-1]).strip()[:500] if tail else None


def rank_of(source: LogSource, text: str) -> int | None:
    if source.rank is not None:
        return source.rank
    m = _RANK_PREFIX.match(text)
    return int(m.group(1)) if m else None


class _Token:
    """Byte positions per replica, and the resume token naming them, kept up to date cheaply
    (one part changes per line, so only that part is rebuilt)."""

    def __init__(self, positions: dict[str, int], names: list[str], single: bool) -> None:
        self.positions = positions
        self.single = single
        self.index: dict[str, int] = {}
        self.parts: list[str] = []
        for name in names:
            self.add(name)

    def add(self, name: str) -> None:
        if name not in self.index:
            self.index[name] = len(self.parts)
            self.parts.append(f"{name}:{self.positions.get(name, 0)}")

    def moved(self, name: str, pos: int) -> str:
        """The token once ``name`` has been read up to byte ``pos``."""
        self.positions[name] = pos
        if self.single:
            return str(pos)
        self.parts[self.index[name]] = f"{name}:{pos}"
        return ",".join(self.parts)


def _start(
    found: list[LogSource], offset: str | int | None, tail: int | None, replica: str | None
) -> tuple[list[LogSource], _Token]:
    """The sources to read and where each starts: at ``offset``, ``tail`` lines from the end,
    or at the beginning."""
    initial = _pick(found, replica)
    names = [replica] if replica is not None else [s.replica for s in initial]
    positions = parse_offset(offset, names)
    if offset in (None, "") and tail is not None:
        positions = {s.replica: tail_start(s.path, tail) for s in initial}
    return initial, _Token(positions, names, single=replica is not None)


def read_lines(
    sources: Callable[[], list[LogSource]],
    *,
    offset: str | int | None = None,
    tail: int | None = None,
    follow: bool = False,
    is_done: Callable[[], bool] = lambda: True,
    poll_interval: float = 0.05,
    replica: str | None = None,
    budget: Budget | None = None,
) -> Iterator[LogLine]:
    """Yield lines of the given sources, interleaved in the order they are found.

    ``sources`` is called again while following, because replicas appear as they start (a
    replica that has written nothing yet simply has no lines). Without ``follow`` the
    iterator ends at the current end of the files; with it, once ``is_done()`` is true and
    everything written has been read. With a ``budget`` it ends once that is spent.
    """
    initial, token = _start(sources(), offset, tail, replica)
    while True:
        done = is_done()  # read before draining: output written before "done" is never missed
        current = _pick(sources(), replica) if follow else initial
        got_any = False
        for s in current:
            token.add(s.replica)
            for block in _drain(s, token.positions.get(s.replica, 0), final=done):
                got_any = True
                for i, text in enumerate(block.texts, 1):
                    pos = block.end(i)
                    rank = s.rank if s.rank is not None else rank_of(s, text)
                    offset = token.moved(s.replica, pos)
                    if budget is not None and not budget.take(block.sizes[i - 1] + len(offset) + _LINE_COST):
                        return
                    yield LogLine(text=text, replica=s.replica, offset=offset, rank=rank)
        if not follow or (done and not got_any):
            return
        if not got_any:
            time.sleep(poll_interval)


def read_runs(
    sources: list[LogSource],
    *,
    offset: str | int | None = None,
    tail: int | None = None,
    replica: str | None = None,
    max_lines: int = 5000,
    final: bool = True,
    budget: Budget | None = None,
) -> list[LogRun]:
    """Up to ``max_lines`` of what the sources hold now, in runs of one replica and rank.

    The bulk counterpart of ``read_lines`` (same offsets, same lines) for followers that poll:
    a block is decoded and split at once, and replicas take turns, sharing ``max_lines``, so
    one busy replica cannot hold back the others' lines. ``final``: the job has ended, so a last
    line without a newline is complete.
    """
    initial, token = _start(sources, offset, tail, replica)
    budget = budget or Budget(1 << 62)  # the caller bounds it in lines only
    runs: list[LogRun] = []
    left = max_lines
    with contextlib.ExitStack() as stack:
        cursors = [
            _Cursor(
                s,
                stack.enter_context(contextlib.closing(_drain(s, token.positions.get(s.replica, 0), final))),
            )
            for s in initial
        ]
        while cursors and left > 0 and not budget.hit:
            share = max(1, left // len(cursors))  # what is left over goes round again
            for cursor in list(cursors):
                got = cursor.take(min(share, left), token, budget)
                if not got:
                    cursors.remove(cursor)
                runs += got
                left -= sum(len(r.lines) for r in got)
                if left == 0 or budget.hit:
                    break
    return runs


def take_lines(lines: Iterator[LogLine], limit: int) -> list[LogLine]:
    """The first ``limit`` of ``lines``; closes ``lines`` so that whatever feeds it stops."""
    try:
        return list(itertools.islice(lines, limit))
    finally:
        close = getattr(lines, "close", None)
        if close is not None:
            close()


def group_runs(lines: Iterator[LogLine], max_lines: int) -> list[LogRun]:
    """Up to ``max_lines`` of ``lines`` as runs (for sources read a line at a time)."""
    runs: list[LogRun] = []
    for line in take_lines(lines, max_lines):
        last = runs[-1] if runs else None
        if last is not None and (last.replica, last.rank) == (line.replica, line.rank):
            last.lines.append(line.text)
            last.offset = line.offset
        else:
            runs.append(LogRun(line.replica, line.rank, [line.text], line.offset))
    return runs


class _Cursor:
    """Where a bulk read stands in one source: the block being handed out, and how far."""

    def __init__(self, source: LogSource, blocks: Iterator[_Block]) -> None:
        self.source, self.blocks = source, blocks
        self.block: _Block | None = None
        self.used = 0

    def take(self, count: int, token: _Token, budget: Budget) -> list[LogRun]:
        """Up to ``count`` more lines (never past the current block nor the budget) as runs;
        [] at the end (or when the budget is spent)."""
        if self.block is None or self.used == len(self.block.texts):
            self.block, self.used = next(self.blocks, None), 0
            if self.block is None:
                return []
        block, first = self.block, self.used
        last = min(len(block.texts), first + count)
        last = self.used = first + budget.fit([size + 4 for size in block.sizes[first:last]])
        if last == first:
            return []
        texts = block.texts if (first, last) == (0, len(block.texts)) else block.texts[first:last]
        source, replica = self.source, self.source.replica
        if source.rank is not None:
            runs = [LogRun(replica, source.rank, texts, token.moved(replica, block.end(last)))]
        else:
            runs = []  # a file of several ranks (a pod's): a run per rank change
            for rank, group in itertools.groupby(texts, key=lambda text: rank_of(source, text)):
                lines = list(group)
                first += len(lines)
                runs.append(LogRun(replica, rank, lines, token.moved(replica, block.end(first))))
        budget.charge(sum(len(run.offset) + len(run.replica) + _LINE_COST for run in runs))
        return runs


def _pick(found: list[LogSource], replica: str | None) -> list[LogSource]:
    return [s for s in found if replica is None or s.replica == replica]


@dataclass
class _Block:
    """Lines read at once from one file: their texts, and how many bytes of the file each took."""

    texts: list[str]
    sizes: list[int]  # bytes of each line in the file, with its newline if it had one
    start: int  # byte position of the first line

    @functools.cached_property
    def _ends(self) -> list[int]:
        return list(itertools.accumulate(self.sizes, initial=self.start))

    def end(self, count: int) -> int:
        """Byte position after the first ``count`` lines."""
        return self._ends[count]


def _decode(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    # "\r\n" ends a line like "\n": only a chunk still waiting for more ends in "\r".
    return text.replace("\r\n", "\n") if "\r" in text else text


def _piece(data: bytes) -> tuple[str, int]:
    """The first piece of a line longer than ``MAX_LINE``: its text and its size in bytes.

    A progress bar is cut after its last redraw (``\\r``) in reach, anything else at
    ``MAX_LINE`` (never inside a UTF-8 character) with ``CUT_MARKER`` at the end."""
    r = data.rfind(b"\r", 0, MAX_LINE)
    if r > 0 and data[r + 1 : r + 2] != b"\n":
        return data[: r + 1].decode("utf-8", "replace"), r + 1
    n = MAX_LINE
    while n > MAX_LINE - 3 and data[n] & 0xC0 == 0x80:  # a continuation byte: back to the char start
        n -= 1
    return data[:n].decode("utf-8", "replace") + CUT_MARKER, n


def _split(data: bytes, rest: str) -> tuple[list[str], list[int], int]:
    """The lines (and pieces of long lines) at the start of ``data``: texts, sizes, bytes used.

    ``rest`` says what to do with what follows the last newline (at most ``MAX_LINE`` bytes
    once long lines are cut): "keep" it for the next read, hand out "all" of it (nothing more
    will come), or hand it out up to its last ``\\r`` ("bar", a progress bar at the end of the file).
    """
    texts: list[str] = []
    sizes: list[int] = []
    cut = data.rfind(b"\n") + 1
    if cut:
        raw = data[:cut]
        parts = raw.split(b"\n")
        parts.pop()  # the empty piece after the last newline
        if max(map(len, parts)) <= MAX_LINE:  # the usual case: decode the block at once
            # The decoder never takes a newline into a broken UTF-8 sequence, so the lines
            # are the same as when decoding each one.
            texts = _decode(raw).split("\n")[:-1]
            sizes = [len(part) + 1 for part in parts]
        else:
            for part in parts:
                used = _pieces(part, texts, sizes)
                texts.append(_decode(part[used:] + b"\n")[:-1])
                sizes.append(len(part) - used + 1)
    tail = data[cut:]
    used = _pieces(tail, texts, sizes)
    cut += used
    tail = tail[used:]
    end = {"keep": 0, "all": len(tail), "bar": tail.rfind(b"\r") + 1}[rest]
    if end > 0:
        texts.append(tail[:end].decode("utf-8", "replace"))
        sizes.append(end)
        cut += end
    return texts, sizes, cut


def _pieces(data: bytes, texts: list[str], sizes: list[int]) -> int:
    """Cut pieces off ``data`` while more than ``MAX_LINE`` bytes are left; the bytes cut."""
    used = 0
    while len(data) - used > MAX_LINE:
        text, size = _piece(data[used : used + MAX_LINE + 1])
        texts.append(text)
        sizes.append(size)
        used += size
    return used


def _drain(source: LogSource, pos: int, final: bool) -> Generator[_Block, None, None]:
    """The complete lines of ``source`` past byte ``pos``, a block at a time (the file is
    opened without following a link, so no log is read from outside the job)."""
    try:
        f = open_regular(source.path)
    except OSError:  # not there (yet), or a link
        return
    with f:
        size = os.fstat(f.fileno()).st_size
        if size < pos:  # truncated or replaced: start over rather than miss new output
            pos = 0
        if size == pos:
            return
        f.seek(pos)
        carry = b""
        while chunk := f.read(_BLOCK):
            data = carry + chunk
            texts, sizes, used = _split(data, "keep")
            if texts:
                yield _Block(texts, sizes, pos)
                pos += used
            carry = data[used:]
        texts, sizes, used = _split(carry, "all" if final else "bar")
        if texts:
            yield _Block(texts, sizes, pos)
