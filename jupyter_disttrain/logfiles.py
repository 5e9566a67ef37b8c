"""Reading job output from log files: tail, resume from an offset, follow.

A job's output lives in one file per replica (a rank on this machine, a pod on a cluster).
Readers never load a whole file: ``tail`` reads backwards in blocks, ``offset`` seeks, and
``follow`` polls the files for growth. Each ``LogLine`` carries the offset *after* it, so a
reader that stops anywhere can resume with no line lost or repeated.

Lines end at ``\\n``. A progress bar (tqdm) rewrites its line with ``\\r`` and no ``\\n``; such a
pending chunk is handed out once it ends in ``\\r`` (its text keeps the ``\\r``), so viewers can
show the bar move and draw the next chunk over it.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import re
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import InvalidSpecError
from .specs import LogLine, LogRun

_BLOCK = 64 * 1024
_MAX_LINE = 1 << 20  # a "line" longer than this is cut, so one runaway print cannot eat memory
_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:")


@dataclass(frozen=True)
class LogSource:
    replica: str
    path: Path
    rank: int | None = None


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
    """Byte offset where the last ``lines`` complete lines of ``path`` begin."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if lines <= 0:
        return size
    with open(path, "rb") as f:
        pos = size
        # A trailing newline ends the last line; it does not start another.
        f.seek(max(0, size - 1))
        wanted = lines + 1 if size and f.read(1) == b"\n" else lines
        seen = 0
        while pos > 0:
            step = min(_BLOCK, pos)
            pos -= step
            f.seek(pos)
            block = f.read(step)
            idx = len(block)
            while True:
                idx = block.rfind(b"\n", 0, idx)
                if idx < 0:
                    break
                seen += 1
                if seen == wanted:
                    return pos + idx + 1
    return 0


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
) -> Iterator[LogLine]:
    """Yield lines of the given sources, interleaved in the order they are found.

    ``sources`` is called again while following, because replicas appear as they start (a
    replica that has written nothing yet simply has no lines). Without ``follow`` the
    iterator ends at the current end of the files; with it, once ``is_done()`` is true and
    everything written has been read.
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
                    yield LogLine(text=text, replica=s.replica, offset=token.moved(s.replica, pos), rank=rank)
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
) -> list[LogRun]:
    """Up to ``max_lines`` of what the sources hold now, in runs of one replica and rank.

    The bulk counterpart of ``read_lines`` (same offsets, same lines) for followers that poll:
    a block is decoded and split at once, and replicas take turns, sharing ``max_lines``, so
    one busy replica cannot hold back the others' lines. ``final``: the job has ended, so a last
    line without a newline is complete.
    """
    initial, token = _start(sources, offset, tail, replica)
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
        while cursors and left > 0:
            share = max(1, left // len(cursors))  # what is left over goes round again
            for cursor in list(cursors):
                got = cursor.take(min(share, left), token)
                if not got:
                    cursors.remove(cursor)
                runs += got
                left -= sum(len(r.lines) for r in got)
                if left == 0:
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

    def take(self, count: int, token: _Token) -> list[LogRun]:
        """Up to ``count`` more lines (never past the current block) as runs; [] at the end."""
        if self.block is None or self.used == len(self.block.texts):
            self.block, self.used = next(self.blocks, None), 0
            if self.block is None:
                return []
        block, first = self.block, self.used
        last = self.used = min(len(block.texts), first + count)
        texts = block.texts if (first, last) == (0, len(block.texts)) else block.texts[first:last]
        source, replica = self.source, self.source.replica
        if source.rank is not None:
            return [LogRun(replica, source.rank, texts, token.moved(replica, block.end(last)))]
        runs: list[LogRun] = []  # a file of several ranks (a pod's): a run per rank change
        for rank, group in itertools.groupby(texts, key=lambda text: rank_of(source, text)):
            lines = list(group)
            first += len(lines)
            runs.append(LogRun(replica, rank, lines, token.moved(replica, block.end(first))))
        return runs


def _pick(found: list[LogSource], replica: str | None) -> list[LogSource]:
    return [s for s in found if replica is None or s.replica == replica]


@dataclass
class _Block:
    """Lines read at once from one file: their texts, and where in the file they end."""

    texts: list[str]
    lengths: list[int]  # bytes of each line, not counting its newline
    start: int  # byte position of the first line
    newlines: bool = True  # whether each line ended with a newline (only a cut-off piece does not)

    @functools.cached_property
    def _ends(self) -> list[int]:
        return list(itertools.accumulate(self.lengths, initial=self.start))

    def end(self, count: int) -> int:
        """Byte position after the first ``count`` lines."""
        return self._ends[count] + (count if self.newlines else 0)


def _decode(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    # "\r\n" ends a line like "\n": only a chunk still waiting for more ends in "\r".
    return text.replace("\r\n", "\n") if "\r" in text else text


def _drain(source: LogSource, pos: int, final: bool) -> Generator[_Block, None, None]:
    """The complete lines of ``source`` past byte ``pos``, a block at a time.

    A block is decoded as a whole and then split: the decoder never takes a newline into a
    broken UTF-8 sequence, so the lines are the same as when decoding each one.
    """
    try:
        size = os.path.getsize(source.path)
    except FileNotFoundError:
        return
    if size < pos:  # truncated or replaced: start over rather than miss new output
        pos = 0
    if size == pos:
        return
    with open(source.path, "rb") as f:
        f.seek(pos)
        carry = b""
        while chunk := f.read(_BLOCK):
            data = carry + chunk
            cut = data.rfind(b"\n") + 1
            carry = data[cut:]
            if cut:
                raw = data[:cut]
                lengths = list(map(len, raw.split(b"\n")))
                lengths.pop()  # the empty piece after the last newline
                yield _Block(_decode(raw).split("\n")[:-1], lengths, pos)
                pos += cut
            if len(carry) >= _MAX_LINE:
                yield _Block([_decode(carry)], [len(carry)], pos, newlines=False)
                pos += len(carry)
                carry = b""
    # What is left has no newline yet: hand it out only when nothing more will come, or up
    # to its last carriage return (a progress bar that redraws itself).
    cut = len(carry) if final else carry.rfind(b"\r") + 1
    if cut > 0:
        yield _Block([carry[:cut].decode("utf-8", "replace")], [cut], pos, newlines=False)
