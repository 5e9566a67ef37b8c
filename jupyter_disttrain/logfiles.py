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

import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import InvalidSpecError
from .specs import LogLine

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

    def moved(self, name: str) -> str:
        pos = self.positions[name]
        if self.single:
            return str(pos)
        self.parts[self.index[name]] = f"{name}:{pos}"
        return ",".join(self.parts)


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
    initial = _pick(sources(), replica)
    names = [replica] if replica is not None else [s.replica for s in initial]
    positions = parse_offset(offset, names)
    if offset in (None, "") and tail is not None:
        positions = {s.replica: tail_start(s.path, tail) for s in initial}
    token = _Token(positions, names, single=replica is not None)
    while True:
        done = is_done()  # read before draining: output written before "done" is never missed
        current = _pick(sources(), replica) if follow else initial
        got_any = False
        for s in current:
            token.add(s.replica)
            known_rank = s.rank
            for text in _drain(s, positions, final=done):
                got_any = True
                yield LogLine(
                    text=text,
                    replica=s.replica,
                    offset=token.moved(s.replica),
                    rank=known_rank if known_rank is not None else rank_of(s, text),
                )
        if not follow or (done and not got_any):
            return
        if not got_any:
            time.sleep(poll_interval)


def _pick(found: list[LogSource], replica: str | None) -> list[LogSource]:
    return [s for s in found if replica is None or s.replica == replica]


def _drain(source: LogSource, positions: dict[str, int], final: bool) -> Iterator[str]:
    """Yield the complete lines of ``source`` past its position, moving the position along."""
    pos = positions.get(source.replica, 0)
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
            *lines, carry = (carry + chunk).split(b"\n")
            for line in lines:
                pos += len(line) + 1
                positions[source.replica] = pos
                # "\r\n" ends a line like "\n": only a chunk still waiting for more ends in "\r".
                yield line.removesuffix(b"\r").decode("utf-8", "replace")
            if len(carry) >= _MAX_LINE:
                pos += len(carry)
                positions[source.replica] = pos
                yield carry.decode("utf-8", "replace")
                carry = b""
    # What is left has no newline yet: hand it out only when nothing more will come, or up
    # to its last carriage return (a progress bar that redraws itself).
    cut = len(carry) if final else carry.rfind(b"\r") + 1
    if cut > 0:
        positions[source.replica] = pos + cut
        yield carry[:cut].decode("utf-8", "replace")
