"""A warm rank ends as reliably as a cold one (issue 33, item 9): real jobs, real gloo groups.

The script is the shape of pytorch/examples' DDP scripts: a ``main()`` behind a ``__main__``
guard that destroys the process group, then returns, releasing the DDP model and with it the
last reference to the group. Before ``runtime/joined.py`` kept destroyed groups, that release
deadlocked in torch's gloo teardown in 7 of 16 warm runs (0 of 8 cold; 3 of 8 cold when the
script imported torch._dynamo first, as the zygote has).
"""

from __future__ import annotations

import textwrap

import pytest

from jupyter_disttrain import api
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore
from tests.test_warm import _ran_warm
from tests.test_warm_kernel import DDP_BODY, IMPORTS

# The kernel test's DDP loop, as a script's main() behind a __main__ guard.
DDP_MAIN = f"""{IMPORTS}


def main():
{textwrap.indent(DDP_BODY, "    ")}

if __name__ == "__main__":
    main()
    print("ended")
"""
RUNS = 20


@pytest.mark.usefixtures("zygote_dir")
def test_twenty_warm_ddp_runs_with_a_main_guard_all_end(store: JobStore) -> None:
    for run in range(RUNS):
        job = api.submit(DDP_MAIN, store=store, gpus=2, name=f"ddp-{run}")
        status = job.wait(timeout=120)  # a second or so each; a deadlock never ends
        if not status.is_terminal:
            job.cancel()
            raise AssertionError(f"run {run} of {RUNS} hung at exit: {status}")
        assert status.phase is JobPhase.SUCCEEDED and _ran_warm(job), (run, status)
        assert [ln.text for ln in job.logs() if ln.text == "ended"] == ["ended"] * 2
