"""What the backend hands sbatch is what the real sbatch reads: its option table is the installed
sbatch's (prefixes resolve as sbatch resolves them), ``slurm/batch.sh`` alone submits the same job
again (its ``#SBATCH`` lines, quotes and ``#`` in paths and values included), and a control
character in a path is refused in one line before anything is submitted."""

from __future__ import annotations

import re
import string
import subprocess
from pathlib import Path

import pytest

from jupyter_disttrain.backends.slurm import sbatchargs
from jupyter_disttrain.backends.slurm.options import check_sbatch_option
from jupyter_disttrain.backends.slurm.script import BATCH_SCRIPT, SLURM_DIR
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore

from .cluster import SlurmCluster
from .conftest import slurm_id, submit, wait_phase

pytestmark = pytest.mark.slurm


def sbatch_says(cluster: SlurmCluster, *argv: str) -> str:
    """The first line sbatch prints for ``argv`` with no script: how it read the options."""
    done = subprocess.run(
        ["sbatch", *argv],
        env=cluster.client_env(),
        cwd=cluster.dir,
        stdin=subprocess.DEVNULL,  # no script: sbatch submits nothing
        capture_output=True,
        text=True,
    )
    return (done.stderr or done.stdout).split("\n")[0]


def test_the_option_table_is_the_installed_sbatchs(slurm_cluster: SlurmCluster) -> None:
    names: set[str] = set()
    for letter in string.ascii_lowercase:  # `--a` is ambiguous: sbatch names every option it could be
        names |= set(re.findall(r"'--([a-z0-9-]+)'", sbatch_says(slurm_cluster, f"--{letter}"))) - {letter}
    assert names == sbatchargs.OPTIONS
    required = {n for n in names if "requires an argument" in sbatch_says(slurm_cluster, f"--{n}")}
    assert required == sbatchargs.REQUIRED
    # (a value only to those that take none or may take one: `--wrap=1` would submit a job)
    takes = names - required
    no_value = {n for n in takes if "doesn't allow an argument" in sbatch_says(slurm_cluster, f"--{n}=1")}
    assert no_value == sbatchargs.NO_VALUE
    # A prefix is the option sbatch takes it for; a short option with more after it is a cluster.
    for prefix in ("outp", "arr", "chd", "part", "mail-t", "nod", "tim"):
        said = sbatch_says(slurm_cluster, f"--{prefix}")
        if "is ambiguous" in said:
            with pytest.raises(InvalidSpecError, match=f"sbatch reads --{prefix} as any of"):
                sbatchargs.read_option(f"--{prefix}")
        else:
            assert f"'--{sbatchargs.read_option(f'--{prefix}').name}'" in said, said
    assert sbatch_says(slurm_cluster, "-sN") == "sbatch: option requires an argument -- 'N'"
    with pytest.raises(InvalidSpecError, match="several options"):
        check_sbatch_option("-sN9")


def test_the_batch_script_alone_submits_the_same_job(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    work = tmp_path / "exp 'a' #1"  # white space, a quote and a '#' in the working dir and job root
    work.mkdir()
    store = JobStore(work / "jobs")
    comment = 'it\'s "x" #2'
    options = {"time": "5", "sbatch_options": ["--nodelist=dt1", f"--comment={comment}", "--mail-t=NONE"]}
    job = submit(store, "print('ran')\n", gpus=1, name="again", working_dir=str(work), options=options)
    first = slurm_id(job)
    script = store.job_dir(job.id) / SLURM_DIR / BATCH_SCRIPT
    assert "#SBATCH --mail-type=NONE" in script.read_text()
    again = slurm_cluster.run("sbatch", "--hold", "--parsable", str(script)).stdout.strip()
    try:
        shown = [_fields(slurm_cluster, j) for j in (first, again)]
    finally:
        slurm_cluster.run("scancel", again, check=False)
    assert shown[0] == shown[1], shown
    assert shown[0]["Comment"] == comment and shown[0]["WorkDir"] == str(work)
    assert wait_phase(job, {JobPhase.SUCCEEDED, JobPhase.FAILED}).phase is JobPhase.SUCCEEDED


def _fields(cluster: SlurmCluster, slurm_job: str) -> dict[str, str]:
    """What the job asked Slurm for, as ``scontrol show job`` says it (one field a line)."""
    text = cluster.run("scontrol", "show", "job", slurm_job).stdout
    keys = ("JobName", "Partition", "TimeLimit", "NumNodes", "NumTasks", "CPUs/Task", "ReqNodeList")
    keys += ("Requeue",)
    found = {k: v for k, v in re.findall(r"(?:^|\s)([A-Za-z/]+)=(\S*)", text) if k in keys}
    # Free-text fields run to the end of their line.
    for key in ("Comment", "WorkDir", "StdOut", "MailType"):
        m = re.search(rf"^\s*{re.escape(key)}=(.*)$", text, re.MULTILINE)
        found[key] = m.group(1).rstrip() if m else ""
    return found


def test_a_control_character_in_a_path_is_refused_before_anything_is_submitted(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    before = set(slurm_cluster.run("squeue", "--noheader", "--states=all", "-O", "JobID").stdout.split())
    store = JobStore(tmp_path / "jobs")
    (tmp_path / "exp\ntouch X #").mkdir()
    cases = [
        (store, {"working_dir": str(tmp_path / "exp\ntouch X #")}, "working_dir: the job's working dir"),
        (JobStore(tmp_path / "j\rx" / "jobs"), {}, "job root: the job root"),
    ]
    for where, words, message in cases:
        with pytest.raises(InvalidSpecError) as info:
            submit(where, "print(1)\n", **words)
        assert message in str(info.value) and "\n" not in str(info.value), info.value
        assert where.records() == []
    after = set(slurm_cluster.run("squeue", "--noheader", "--states=all", "-O", "JobID").stdout.split())
    assert after <= before  # no new Slurm job (an earlier test's may have been forgotten meanwhile)
