"""What ``%load_ext jupyter_disttrain`` costs: importing ``jupyter_disttrain.notebook.magics`` (its
flags generated from every registered backend's and launcher's options) in a fresh interpreter.

    python bench/bench_import.py [--runs 5] [--compare /path/to/another/checkout]

Each run is a new interpreter that has already imported what a kernel has (ipykernel: IPython,
``importlib.metadata``), so only this package's own cost is timed. With ``--compare`` the runs
alternate between this checkout and the other one (same machine conditions). Prints the median
of the runs, and the package's modules the import loaded.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CODE = """
import sys
sys.path.insert(0, {repo!r})
import importlib, ipykernel.kernelapp, IPython.core.magic_arguments, time
t = time.perf_counter()
try:
    importlib.import_module("jupyter_disttrain.notebook.magics")
except ModuleNotFoundError:  # a checkout from before the root's modules moved into folders
    importlib.import_module("jupyter_disttrain.magics")
ms = (time.perf_counter() - t) * 1000
import jupyter_disttrain
assert jupyter_disttrain.__file__.startswith({repo!r}), jupyter_disttrain.__file__
print(ms, len([m for m in sys.modules if m.startswith("jupyter_disttrain")]))
"""


def once(repo: Path) -> tuple[float, int]:
    out = subprocess.run(
        [sys.executable, "-c", CODE.format(repo=str(repo))],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    ).stdout.split()
    return float(out[0]), int(out[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--compare", type=Path, help="another checkout of jupyter_disttrain")
    args = parser.parse_args()
    repos = [REPO, *([args.compare.resolve()] if args.compare else [])]
    times: dict[Path, list[float]] = {repo: [] for repo in repos}
    modules: dict[Path, int] = {}
    for _ in range(args.runs):
        for repo in repos:
            ms, modules[repo] = once(repo)
            times[repo].append(ms)
    for repo in repos:
        runs = ", ".join(f"{t:.0f}" for t in sorted(times[repo]))
        median = statistics.median(times[repo])
        print(
            f"{repo}: import of the magic median {median:.1f} ms "
            f"of {args.runs} ({runs}); {modules[repo]} modules of the package"
        )


if __name__ == "__main__":
    main()
