"""``jupyter disttrain``: list, inspect, follow, cancel and run jobs from a terminal."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .commands import run_subcommand
from .model.errors import DistTrainError


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run_subcommand(sys.argv[1:] if argv is None else argv)
    except DistTrainError as exc:
        print(f"jupyter disttrain: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
