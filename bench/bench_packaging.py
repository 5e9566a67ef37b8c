"""Packaging time against history size: a notebook of N statements whose %%distrun cell uses a
model, an optimizer and an argparse parser rebuilt from the history (the slice), against the same
cell whose objects are built inside it (nothing to slice).

    python bench/bench_packaging.py [--sizes 350 1400 5600]

Each history repeats a 7-statement block (imports, a config call, a value, a def, a model, a method
call on it, a print), so N statements hold N/7 redefinitions of each name: the latest wins. Prints
the median packaging time per size for both cells and their ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import time

from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain.packaging import package_cell

BLOCK = (
    "import torch\nimport argparse\ntorch.manual_seed(0)\nlr = 0.1\n"
    "def scale(x):\n    return x * 2\nmodel = torch.nn.Linear(4, 1)\nmodel.bias.data.fill_(0.5)\nprint(model)"
)
SETUP = (
    "parser = argparse.ArgumentParser()\nparser.add_argument('--epochs', type=int, default=1)\n"
    "opt = torch.optim.SGD(model.parameters(), lr=lr)"
)
SLICED = "args = parser.parse_args([])\nprint(scale(lr), model, opt, args)"
INSIDE = (
    "model = torch.nn.Linear(4, 1)\nopt = torch.optim.SGD(model.parameters(), lr=lr)\n"
    "print(scale(lr), model, opt)"
)


def history(statements: int) -> tuple[list[str], InteractiveShell]:
    shell = InteractiveShell.instance()
    with contextlib.redirect_stdout(io.StringIO()):  # the blocks' print(model)
        for _ in range(max(1, statements // 7)):
            shell.run_cell(BLOCK, store_history=True)
        shell.run_cell(SETUP, store_history=True)
    return list(shell.user_ns["In"][1:]), shell


def timed(cell: str, cells: list[str], shell: InteractiveShell, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        package_cell(cell, cells, shell.user_ns)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[350, 1400, 5600])
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    print(f"{'statements':>10} {'sliced (ms)':>12} {'in-cell (ms)':>13} {'ratio':>6}")
    for size in options.sizes:
        cells, shell = history(size)
        sliced = timed(SLICED, cells, shell, options.repeat)
        inside = timed(INSIDE, cells, shell, options.repeat)
        print(f"{size:>10} {sliced * 1000:>12.1f} {inside * 1000:>13.1f} {sliced / inside:>6.2f}")
        InteractiveShell.clear_instance()


if __name__ == "__main__":
    main()
