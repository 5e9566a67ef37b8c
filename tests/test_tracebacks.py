"""A rank's traceback as the notebook's own error: parsing, mapping to cells, rendering, stacks."""

from __future__ import annotations

import json
import re

from jupyter_disttrain.model import tracebacks as tb
from jupyter_disttrain.packaging import package_cell
from jupyter_disttrain.packaging.origins import CELL_LABEL, ORIGINS_FILE

HISTORY = [
    "import math\n",
    "\ndef stuck_forever(x):\n    # a helper\n    y = x * 2\n    raise ValueError(f'bad value {y}')\n",
]
CELL = "rank = 1\nt = math.sqrt(4)\nif rank == 1:\n    stuck_forever(3)\nprint('done', t)\n"


def _packaged() -> tuple[str, dict]:
    ns: dict = {"math": __import__("math")}
    exec(HISTORY[1], ns)
    packaged = package_cell(CELL, HISTORY, ns, cell_line=2, cell_label="In [3]")
    return packaged.source, json.loads(packaged.files[ORIGINS_FILE])


def _line_of(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.split("\n"), 1) if line.strip() == text)


def _log(source: str, product: str = "/site/jupyter_disttrain") -> list[str]:
    """What a failing rank prints: runpy's and the rank wrapper's frames, then the script's."""
    call, raise_ = (
        _line_of(source, "stuck_forever(3)"),
        _line_of(source, "raise ValueError(f'bad value {y}')"),
    )
    return [
        "step 1",
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "<frozen runpy>", line 198, in _run_module_as_main',
        f'[rank1]:   File "{product}/runtime/worker.py", line 99, in main',
        '[rank1]:     exec(compile(source, script, "exec"), namespace)',
        f'[rank1]:   File "/jobs/j-1/train.py", line {call}, in <module>',
        "[rank1]:     stuck_forever(3)",
        f'[rank1]:   File "/jobs/j-1/train.py", line {raise_}, in stuck_forever',
        "[rank1]:     raise ValueError(f'bad value {y}')",
        "[rank1]:     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "[rank1]: ValueError: bad value 6",
    ]


def test_the_script_lines_map_back_to_their_cells_and_lines() -> None:
    source, origins = _packaged()
    where = tb.LineMap.of("train.py", source, origins)
    # the cell's `stuck_forever(3)` is its 4th line: JupyterLab shows it as line 5 under %%distrun
    labels = [label for label, _ in where.cells]
    index, line = where.lines[_line_of(source, "stuck_forever(3)")]
    assert (labels[index], line) == ("In [3]", 5)
    index, line = where.lines[_line_of(source, "raise ValueError(f'bad value {y}')")]
    assert (labels[index], line) == ("In [2]", 5)  # the blank first line of In [2] counts
    assert where.lines[_line_of(source, "import math  # In [1]")][1] == 1
    assert _line_of(source, 'if __name__ == "__main__":') not in where.lines  # the packaging's own


def test_a_failing_ranks_traceback_reads_like_the_notebooks_own_error() -> None:
    source, origins = _packaged()
    found = tb.read_traceback(_log(source))
    assert found is not None
    tb.map_frames(found, tb.LineMap.of("train.py", source, origins))
    assert found.last.hidden == 2  # runpy's and the rank wrapper's frames
    plain = tb.render(found, colour=False)
    assert plain[1].startswith("ValueError") and plain[1].endswith("Traceback (most recent call last)")
    assert plain[2:] == [
        "Cell In[3], line 5",
        "      3 t = math.sqrt(4)",
        "      4 if rank == 1:",
        "----> 5     stuck_forever(3)",
        "",
        "Cell In[2], line 5, in stuck_forever()",
        "      3     # a helper",
        "      4     y = x * 2",
        "----> 5     raise ValueError(f'bad value {y}')",
        "",
        "ValueError: bad value 6",
    ]
    assert tb.headline(found) == "ValueError: bad value 6 (In [2], line 5)"
    coloured = "\n".join(tb.render(found))
    assert "\x1b[31mValueError\x1b[0m: bad value 6" in coloured and "worker.py" not in coloured
    assert not any(line.startswith("[rank1]") for line in found.raw) and "runpy" in "\n".join(found.raw)


def test_library_frames_stay_and_unmapped_script_lines_name_the_script() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "/jobs/j/train.py", line 2, in <module>',
        "    main()",
        '  File "/usr/lib/python3/site-packages/torch/distributed/c10d.py", line 2501, in all_reduce',
        "    work = group.allreduce([tensor], opts)",
        "RuntimeError: Connection closed by peer [127.0.0.1]:29500",
    ]
    found = tb.read_traceback(lines)
    assert found is not None
    tb.map_frames(found, tb.LineMap.of("train.py", "x = 1\nmain()\n", None))
    assert tb.render(found, colour=False)[2:] == [
        "File /jobs/j/train.py:2, in <module>()",
        "----> 2 main()",
        "",
        "File /usr/lib/python3/site-packages/torch/distributed/c10d.py:2501, in all_reduce()",
        "-> 2501 work = group.allreduce([tensor], opts)",
        "",
        "RuntimeError: Connection closed by peer [127.0.0.1]:29500",
    ]


def test_a_chained_traceback_keeps_every_exception_and_a_stale_one_is_not_taken() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in <module>',
        "OSError: old, handled earlier",
        "training goes on",
        "Traceback (most recent call last):",
        '  File "/x/lib.py", line 3, in load',
        "KeyError: 'w'",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "/x/lib.py", line 9, in main',
        "RuntimeError: cannot load",
        "  the file is damaged",
    ]
    found = tb.read_traceback(lines)
    assert found is not None and [s.exception for s in found.sections] == ["KeyError", "RuntimeError"]
    assert (
        found.last.link.startswith("The above exception")
        and found.last.message == "cannot load\n  the file is damaged"
    )
    assert tb.read_traceback(["no error here"]) is None


def test_a_malformed_line_map_maps_nothing_and_a_script_line_that_differs_is_not_mapped() -> None:
    source, origins = _packaged()
    assert tb.LineMap.of("train.py", source, {"cells": [{"label": 1}], "lines": "x"}).lines == {}
    where = tb.LineMap.of("train.py", source, origins)
    line = _line_of(source, "stuck_forever(3)")
    assert not where.is_script("/jobs/j/train.py", line, "something else")  # another train.py
    assert not where.is_script("/jobs/j/other.py", line, "stuck_forever(3)")


def test_stack_dumps_name_cells_and_fold_the_products_frames() -> None:
    source, origins = _packaged()
    call = _line_of(source, "stuck_forever(3)")
    dump = "\n".join(
        [
            "Thread 0x00007f (most recent call first):",
            f'  File "/jobs/j/train.py", line {call} in <module>',
            '  File "/site/jupyter_disttrain/runtime/worker.py", line 99 in main',
            '  File "<frozen runpy>", line 88 in _run_code',
        ]
    )
    mapped = tb.map_stack(dump, tb.LineMap.of("train.py", source, origins))
    assert mapped.split("\n") == [
        "Thread 0x00007f (most recent call first):",
        "  Cell In[3], line 5, in <module>",
        "      stuck_forever(3)",
        "    … 2 frame(s) of jupyter_disttrain and runpy hidden",
    ]
    spy = "\n".join(
        [
            'Thread 12 (idle): "MainThread"',
            f"    stuck_forever (train.py:{call})",
            "    main (jupyter_disttrain/runtime/worker.py:99)",
        ]
    )
    assert "Cell In[3], line 5, in stuck_forever" in tb.map_stack(
        spy, tb.LineMap.of("train.py", source, origins)
    )


def test_without_an_execution_count_the_cell_is_in_brackets() -> None:
    packaged = package_cell("x = 1\nraise SystemExit(x)\n", [], {})
    assert json.loads(packaged.files[ORIGINS_FILE])["cells"][0]["label"] == CELL_LABEL
    assert re.fullmatch(r"In \[ \]", CELL_LABEL)


def _error(*sections: str) -> tb.Traceback:
    """A traceback of ``sections`` (``Type: message`` each), chained in that order."""
    lines: list[str] = []
    for i, section in enumerate(sections):
        if i:
            lines += ["", "During handling of the above exception, another exception occurred:", ""]
        lines += ["Traceback (most recent call last):", '  File "/x/train.py", line 3, in <module>', section]
    found = tb.read_traceback(lines)
    assert found is not None
    return found


def test_an_error_of_losing_a_peer_is_told_from_an_error_of_the_ranks_own() -> None:
    """Issue 34, item 22: what a rank raises because its peer left (gloo's, the store's, a signal
    that stopped it) is no failure of its own; any other error is, even a RuntimeError from torch."""
    lost = [
        "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer [::1]:3",
        "torch.distributed.DistNetworkError: failed to recv, got 0 bytes",
        "torch.distributed.DistBackendError: NCCL error: remote process exited or there was a network error",
        "KeyboardInterrupt",
        "lightning.fabric.utilities.exceptions.SIGTERMException",
    ]
    own = [
        "ValueError: bad config: lr must be positive",
        "RuntimeError: ProcessGroupGloo does not support reduce_scatter",
        "TypeError: unsupported operand\nException raised from recvBytes, frame #3: Timed out waiting",
    ]
    assert [tb.lost_peer(_error(e)) for e in lost] == [True] * len(lost)
    assert [tb.lost_peer(_error(e)) for e in own] == [False] * len(own)
    # a user's error raised while handling the lost connection: still the peer's doing
    assert tb.lost_peer(_error(lost[0], "ValueError: could not sync the metrics"))


def test_the_line_map_holds_no_cell_text_and_the_script_shows_the_lines() -> None:
    # A config cell with a secret the script does not use, on a line next to one it does.
    history = ["lr = 0.1\nsmtp_password = 'pw-unread-1'\n", "def train(rate):\n    raise ValueError(rate)\n"]
    ns: dict = {"lr": 0.1, "smtp_password": "pw-unread-1"}
    exec(history[1], ns)
    packaged = package_cell("train(lr)\n", history, ns, cell_line=2, cell_label="In [3]")
    assert all(b"pw-unread-1" not in data for data in packaged.files.values())
    origins = json.loads(packaged.files[ORIGINS_FILE])
    assert all(set(cell) == {"label", "first"} for cell in origins["cells"])  # numbers, not text
    source = packaged.source
    lines = [
        "Traceback (most recent call last):",
        f'  File "/jobs/j/train.py", line {_line_of(source, "train(lr)")}, in <module>',
        f'  File "/jobs/j/train.py", line {_line_of(source, "raise ValueError(rate)")}, in train',
        "ValueError: 0.1",
    ]
    found = tb.read_traceback(lines)
    assert found is not None
    tb.map_frames(found, tb.LineMap.of("train.py", source, origins))
    assert tb.render(found, colour=False)[2:-1] == [
        "Cell In[3], line 2",
        "----> 2 train(lr)",
        "",
        "Cell In[2], line 2, in train()",
        "      1 def train(rate):",
        "----> 2     raise ValueError(rate)",
        "",
    ]
