"""Run on a job's node (through ``srun --jobid ... --overlap``): the stacks of one of its ranks.

``python -m jupyter_disttrain.backends.slurm.stacks JOB_DIR JOB_ID REPLICA METHOD`` prints the
``StackDump`` as one JSON line, or the reason it cannot on stderr (exit 1). The rank is on this
node, so py-spy or the rank wrapper's faulthandler reach it as they would locally.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from ...model.errors import DistTrainError
from ...monitoring.stacks import dump_replica


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(
            "usage: python -m jupyter_disttrain.backends.slurm.stacks JOB_DIR JOB_ID REPLICA METHOD",
            file=sys.stderr,
        )
        return 2
    job_dir, job_id, replica, method = argv
    try:
        dump = dump_replica(Path(job_dir), job_id, replica, method)
    except DistTrainError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(json.dumps(asdict(dump)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
