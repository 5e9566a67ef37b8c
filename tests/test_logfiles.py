"""Reading logs: tail, resume tokens, interleaving, progress bars, follow."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from jupyter_disttrain.errors import InvalidSpecError
from jupyter_disttrain.logfiles import LogSource, parse_offset, read_lines, tail_start


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
