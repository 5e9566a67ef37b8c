"""Reading logs: tail, resume tokens, interleaving, progress bars, follow."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import LogLine
from jupyter_disttrain.storage.logfiles import (
    LogSource,
    group_runs,
    parse_offset,
    read_lines,
    read_runs,
    tail_start,
)


def _sources(*paths: Path):
    return lambda: [LogSource(p.stem, p, i) for i, p in enumerate(paths)]


def test_tail_start_counts_lines_from_the_end(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"".join(f"line {i}\n".encode() for i in range(100_000)))
    lines = [ln.text for ln in read_lines(_sources(log), tail=3)]
    assert lines == ["line 99997", "line 99998", "line 99999"]
    assert tail_start(log, 0) == log.stat().st_size
    assert tail_start(log, 10**9) == 0


def test_resume_from_any_line_gives_each_line_once(tmp_path: Path) -> None:
    a, b = tmp_path / "rank-0.log", tmp_path / "rank-1.log"
    a.write_text("".join(f"a{i}\n" for i in range(50)))
    b.write_text("".join(f"b{i}\n" for i in range(30)))
    full = list(read_lines(_sources(a, b)))
    assert [ln.text for ln in full if ln.replica == "rank-0"] == [f"a{i}" for i in range(50)]
    for cut in (0, 1, 17, 49, 50, 79):
        rest = list(read_lines(_sources(a, b), offset=full[cut].offset))
        assert [ln.text for ln in full[: cut + 1]] + [ln.text for ln in rest] == [ln.text for ln in full]


def test_single_replica_offset_is_a_byte_offset(tmp_path: Path) -> None:
    a = tmp_path / "rank-0.log"
    a.write_text("hello\nworld\n")
    lines = list(read_lines(_sources(a), replica="rank-0"))
    assert [ln.offset for ln in lines] == ["6", "12"]
    assert [ln.text for ln in read_lines(_sources(a), replica="rank-0", offset=6)] == ["world"]


def test_bad_offsets_are_refused_and_a_silent_replica_has_no_lines(tmp_path: Path) -> None:
    a = tmp_path / "rank-0.log"
    a.write_text("x\n")
    with pytest.raises(InvalidSpecError, match="resume token"):
        parse_offset("rank-0:abc", ["rank-0"])
    assert list(read_lines(_sources(a), replica="rank-9")) == []


def test_tokens_from_before_a_replica_appeared_still_resume(tmp_path: Path) -> None:
    a, b = tmp_path / "rank-0.log", tmp_path / "rank-1.log"
    a.write_text("a0\na1\n")
    first = list(read_lines(_sources(a)))
    b.write_text("b0\n")
    rest = [ln.text for ln in read_lines(_sources(a, b), offset=first[0].offset)]
    assert rest == ["a1", "b0"]


def test_partial_line_waits_and_progress_bars_come_out_at_carriage_returns(tmp_path: Path) -> None:
    a = tmp_path / "rank-0.log"
    a.write_bytes(b"done\n 10%|#\r 20%|##\r 3")
    running = [ln.text for ln in read_lines(_sources(a), is_done=lambda: False)]
    assert running == ["done", " 10%|#\r 20%|##\r"]
    finished = [ln.text for ln in read_lines(_sources(a), is_done=lambda: True)]
    assert finished[-1].endswith(" 3")


def test_a_finished_progress_bar_or_crlf_line_does_not_end_in_carriage_return(tmp_path: Path) -> None:
    a = tmp_path / "rank-0.log"
    a.write_bytes(b"progress 0%\rprogress 100%\r\nwindows line\r\n")
    assert [ln.text for ln in read_lines(_sources(a))] == ["progress 0%\rprogress 100%", "windows line"]


def test_follow_sees_lines_written_later_and_stops_when_done(tmp_path: Path) -> None:
    a = tmp_path / "rank-0.log"
    a.write_text("")
    finished = threading.Event()

    def writer() -> None:
        with open(a, "a") as f:
            for i in range(20):
                f.write(f"n{i}\n")
                f.flush()
                time.sleep(0.01)
        finished.set()

    t = threading.Thread(target=writer)
    t.start()
    got = [
        ln.text for ln in read_lines(_sources(a), follow=True, is_done=finished.is_set, poll_interval=0.01)
    ]
    t.join()
    assert got == [f"n{i}" for i in range(20)]


def test_rank_prefix_is_parsed_when_the_file_holds_several_ranks(tmp_path: Path) -> None:
    pod = tmp_path / "worker-0.log"
    pod.write_text("[rank3]: hi\nplain\n")
    lines = list(read_lines(lambda: [LogSource("worker-0", pod)]))
    assert [(ln.rank, ln.text) for ln in lines] == [(3, "[rank3]: hi"), (None, "plain")]


def _awkward_logs(tmp_path: Path) -> list[LogSource]:
    """Files with every kind of line a reader must get right, spanning many read blocks."""
    a, b, pod = tmp_path / "rank-0.log", tmp_path / "rank-1.log", tmp_path / "worker-0.log"
    a.write_bytes(
        b"".join(f"a{i} {'x' * (i % 97)}\n".encode() for i in range(20_000)) + b"crlf\r\n 5%\r 9%\r"
    )
    b.write_bytes(b"caf\xc3\xa9\nbroken \xc3\n\xff\xfe\n" + b"y" * 200_000 + b"\nlast")
    pod.write_bytes(b"[rank2]: p0\n[rank2]: p1\n[rank3]: q0\nplain\n[rank3]: q1\n")
    return [LogSource("rank-0", a, 0), LogSource("rank-1", b, 1), LogSource("worker-0", pod)]


def _part(token: str, replica: str) -> str:
    return dict(p.rsplit(":", 1) for p in token.split(","))[replica]


@pytest.mark.parametrize("final", [True, False])
def test_runs_hold_the_same_lines_and_offsets_as_read_lines(tmp_path: Path, final: bool) -> None:
    sources = _awkward_logs(tmp_path)
    lines = list(read_lines(lambda: sources, is_done=lambda: final))
    runs = read_runs(sources, max_lines=10**6, final=final)
    by_replica = {s.replica: [ln for ln in lines if ln.replica == s.replica] for s in sources}
    for replica, want in by_replica.items():
        mine = [r for r in runs if r.replica == replica]
        assert [t for r in mine for t in r.lines] == [ln.text for ln in want]
    # A pod's file holds several ranks: its runs split where the rank changes.
    assert [(r.rank, len(r.lines)) for r in runs if r.replica == "worker-0"] == [
        (2, 2),
        (3, 1),
        (None, 1),
        (3, 1),
    ]
    # Each run ends where read_lines says its last line ends (lines counted per replica: the
    # pieces of a long line have the same text).
    ends = {s.replica: [_part(ln.offset, s.replica) for ln in by_replica[s.replica]] for s in sources}
    seen = dict.fromkeys(ends, 0)
    for run in runs:
        seen[run.replica] += len(run.lines)
        assert _part(run.offset, run.replica) == ends[run.replica][seen[run.replica] - 1]
    assert ("last" in [t for r in runs for t in r.lines]) is final


def test_runs_resumed_from_their_offsets_give_each_line_once(tmp_path: Path) -> None:
    sources = _awkward_logs(tmp_path)
    want = {
        s.replica: [ln.text for ln in read_lines(lambda: sources) if ln.replica == s.replica] for s in sources
    }
    got: dict[str, list[str]] = {s.replica: [] for s in sources}
    token = None
    reads = 0
    while True:
        runs = read_runs(sources, offset=token, max_lines=777)
        if not runs:
            break
        reads += 1
        assert sum(len(r.lines) for r in runs) <= 777
        for run in runs:
            got[run.replica] += run.lines
        token = runs[-1].offset
    assert got == want
    assert reads > 20_000 // 777


def test_runs_let_every_replica_have_a_turn(tmp_path: Path) -> None:
    busy, quiet = tmp_path / "rank-0.log", tmp_path / "rank-1.log"
    busy.write_text("".join(f"busy {i}\n" for i in range(100_000)))
    quiet.write_text("quiet 0\nquiet 1\n")
    runs = read_runs([LogSource("rank-0", busy, 0), LogSource("rank-1", quiet, 1)], max_lines=5000)
    assert [r.lines for r in runs if r.replica == "rank-1"] == [["quiet 0", "quiet 1"]]
    assert sum(len(r.lines) for r in runs) == 5000


def test_runs_of_one_replica_carry_a_byte_offset(tmp_path: Path) -> None:
    sources = _awkward_logs(tmp_path)
    runs = read_runs(sources, replica="rank-1", tail=2)
    assert [t for r in runs for t in r.lines][-1] == "last"
    assert runs[-1].offset == str(sources[1].path.stat().st_size)


def test_lines_read_one_by_one_are_grouped_into_runs_and_the_reader_is_closed() -> None:
    closed = []

    def pod_lines():  # as pods/log hands them out: a line at a time, tagged per replica
        try:
            for i, (replica, rank) in enumerate([("w-0", 0), ("w-0", 0), ("w-0", 1), ("w-1", 2), ("w-0", 0)]):
                yield LogLine(text=f"t{i}", replica=replica, offset=f"tok{i}", rank=rank)
        finally:
            closed.append(True)

    runs = group_runs(pod_lines(), max_lines=4)
    assert [(r.replica, r.rank, r.lines, r.offset) for r in runs] == [
        ("w-0", 0, ["t0", "t1"], "tok1"),
        ("w-0", 1, ["t2"], "tok2"),
        ("w-1", 2, ["t3"], "tok3"),
    ]
    assert closed == [True]
