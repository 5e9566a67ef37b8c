"""Log reads bounded in bytes: long lines in pieces with exact offsets, a budget per answer,
``tail`` that counts ``\\r`` as a line end (issue 9, item 6)."""

from __future__ import annotations

from pathlib import Path

from jupyter_disttrain.storage.logfiles import (
    ANSWER_BYTES,
    CUT_MARKER,
    MAX_LINE,
    Budget,
    LogSource,
    read_lines,
    read_runs,
    tail_start,
    take_lines,
)


def _source(path: Path, data: bytes) -> list[LogSource]:
    path.write_bytes(data)
    return [LogSource("rank-0", path, 0)]


def _read_all_in_answers(sources: list[LogSource], budget: int, final: bool = True) -> list[tuple[str, int]]:
    """Every line, read as a client does: bounded answers, each resuming at the last offset."""
    out: list[tuple[str, int]] = []
    offset: str | None = None
    while True:
        b = Budget(budget)
        got = take_lines(read_lines(lambda: sources, offset=offset, replica="rank-0", budget=b), 10_000)
        if not got:
            return out
        assert sum(len(line.text) for line in got) <= budget + MAX_LINE + len(CUT_MARKER)
        out += [(line.text, int(line.offset)) for line in got]
        offset = got[-1].offset


def test_a_long_line_comes_in_pieces_with_a_marker_and_exact_offsets(tmp_path: Path) -> None:
    data = b"start\n" + b"x" * (3 * MAX_LINE + 123) + b"\nafter\n" + b"\xff\xfe" * 50_000 + b"\nend"
    sources = _source(tmp_path / "rank-0.log", data)
    lines = [(ln.text, int(ln.offset)) for ln in read_lines(lambda: sources, replica="rank-0")]
    texts = [t for t, _ in lines]
    assert texts[0] == "start" and "after" in texts
    assert all(len(t) <= MAX_LINE + len(CUT_MARKER) for t in texts)
    cut = [t for t in texts if t.endswith(CUT_MARKER)]
    assert len(cut) == 3 + 1  # 3 full pieces of x, and 1 of the 100,000-byte garbage line
    assert texts[1:5] == ["x" * MAX_LINE + CUT_MARKER] * 3 + ["x" * 123]
    assert texts[-1] == "end" and lines[-1][1] == len(data)
    # Offsets are exact: each line's offset is where the next one starts in the file.
    rebuilt = b""
    previous = 0
    for text, offset in lines:
        assert offset > previous
        rebuilt_piece = data[previous:offset]
        stripped = text.removesuffix(CUT_MARKER)
        assert rebuilt_piece.rstrip(b"\n").decode("utf-8", "replace") == stripped
        rebuilt += rebuilt_piece
        previous = offset
    assert rebuilt == data


def test_bounded_answers_resumed_by_offset_lose_and_repeat_nothing(tmp_path: Path) -> None:
    data = b"".join(
        [
            b"a\n" * 1000,
            b"y" * (5 * MAX_LINE + 7),
            b"\n",
            "é".encode() * 70_000,
            b"\n",
            b"\rbar" * 30_000,
            b"\n",
        ]
    )
    sources = _source(tmp_path / "rank-0.log", data)
    whole = [(ln.text, int(ln.offset)) for ln in read_lines(lambda: sources, replica="rank-0")]
    for budget in (1000, 100_000, ANSWER_BYTES):
        assert _read_all_in_answers(sources, budget) == whole
    # A piece is never cut inside a UTF-8 character.
    assert not any("\ufffd" in text for text, _ in whole)


def test_runs_are_bounded_by_the_budget_and_resume_exactly(tmp_path: Path) -> None:
    data = b"\xff" * (20 * MAX_LINE)  # invalid UTF-8, no newline: the worst case for JSON
    sources = _source(tmp_path / "rank-0.log", data)
    budget = Budget(4 * (MAX_LINE + 64))
    runs = read_runs(sources, replica="rank-0", max_lines=10_000, budget=budget)
    assert budget.hit and sum(len(r.lines) for r in runs) == 4
    assert int(runs[-1].offset) == 4 * MAX_LINE
    rest = read_runs(sources, replica="rank-0", offset=runs[-1].offset, max_lines=10_000)
    assert sum(len(r.lines) for r in rest) == 16 and int(rest[-1].offset) == len(data)


def test_tail_shows_a_progress_bars_latest_state(tmp_path: Path) -> None:
    bar = b"".join(f"\r{i:>7}/200000 |{'#' * (i % 40)}".encode() for i in range(200_000))
    log = tmp_path / "rank-0.log"
    sources = _source(log, b"epoch 1\n" + bar + b"\r")
    last = f"{199_999:>7}/200000 |{'#' * (199_999 % 40)}\r"
    for final in (True, False):
        (line,) = list(read_lines(lambda: sources, tail=1, replica="rank-0", is_done=lambda f=final: f))
        assert line.text == last and int(line.offset) == log.stat().st_size
    (two,) = list(read_lines(lambda: sources, tail=2, replica="rank-0"))  # one pending chunk
    assert two.text == f"{199_998:>7}/200000 |{'#' * (199_998 % 40)}\r" + last
    # \r\n is one line end, and a trailing one does not start another line.
    sources = _source(log, b"a\r\nb\r\nc\r\n")
    assert [ln.text for ln in read_lines(lambda: sources, tail=2, replica="rank-0")] == ["b", "c"]


def test_tail_of_a_log_with_no_line_end_is_its_last_piece(tmp_path: Path) -> None:
    log = tmp_path / "rank-0.log"
    log.write_bytes(b"\x00\xff" * (5 * MAX_LINE))
    size = log.stat().st_size
    assert tail_start(log, 1) == size - MAX_LINE
    assert tail_start(log, 3) == size - 3 * MAX_LINE
    assert tail_start(log, 10**6) == 0
    (line,) = list(read_lines(lambda: [LogSource("rank-0", log, 0)], tail=1, replica="rank-0"))
    assert int(line.offset) == size and len(line.text) == MAX_LINE


def test_a_crlf_across_read_blocks_is_one_line_end(tmp_path: Path) -> None:
    # 64 KiB blocks: put the "\r" of a "\r\n" as the last byte of the first block.
    first = b"z" * (64 * 1024 - 3) + b"\rp\r"
    sources = _source(tmp_path / "rank-0.log", first + b"\nnext\n")
    texts = [ln.text for ln in read_lines(lambda: sources, replica="rank-0")]
    assert texts == ["z" * (64 * 1024 - 3) + "\rp", "next"]
