"""What Slurm runs for a spec, word for word (pure: no cluster), and the options' one-line refusals."""

from __future__ import annotations

import json

import pytest

from jupyter_disttrain.backends.agents.request import AgentCommand, LocalRequest
from jupyter_disttrain.backends.slurm.options import (
    SlurmOptions,
    check_sbatch_option,
    parse_options,
    time_seconds,
)
from jupyter_disttrain.backends.slurm.request import BATCH, STEP, SlurmRequest
from jupyter_disttrain.backends.slurm.script import (
    START,
    Place,
    batch_script,
    format_request,
    node_argv,
    sbatch_argv,
    srun_argv,
    torchrun_argv,
)
from jupyter_disttrain.launchers.base import Role
from jupyter_disttrain.model.errors import InvalidSpecError
from jupyter_disttrain.model.specs import JobSpec

JOB_DIR = "/home/u/proj/.disttrain/jobs/mnist-abcde"
SPEC = JobSpec(name="mnist", nodes=2, nproc_per_node=4, max_restarts=1, backend="slurm", args=["--lr", "0.1"])
CPU = Place(mode=BATCH, version=(22, 5, 8), gpu=False)


def test_a_batch_job_on_cpus_asks_one_task_per_node_with_a_cpu_per_process() -> None:
    opts = parse_options({"partition": "debug", "time": "1:30:00", "mem": "16G", "account": "team"})
    assert sbatch_argv(SPEC, "mnist-abcde", JOB_DIR, opts, CPU, "/home/u/proj") == [
        "sbatch",
        "--parsable",
        "--job-name=mnist-abcde",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=4",
        f"--output={JOB_DIR}/launcher.log",
        "--open-mode=append",
        "--chdir=/home/u/proj",
        "--export=ALL",
        "--no-requeue",
        "--partition=debug",
        "--account=team",
        "--time=1:30:00",
        "--mem=16G",
        f"{JOB_DIR}/slurm/batch.sh",
    ]


def test_gpus_per_node_or_gres_whichever_the_cluster_takes() -> None:
    opts = parse_options(
        {"cpus_per_gpu": 8, "exclusive": True, "requeue": True, "sbatch_options": ["--mail-type=END"]}
    )
    tres = Place(mode=BATCH, version=(23, 11, 4), gpu=True)
    argv = sbatch_argv(SPEC, "mnist-abcde", JOB_DIR, opts, tres, "/w")
    assert argv[5:7] == ["--gpus-per-node=4", "--cpus-per-gpu=8"]
    assert argv[-4:] == ["--requeue", "--exclusive", "--mail-type=END", f"{JOB_DIR}/slurm/batch.sh"]
    gres = Place(mode=BATCH, version=(23, 11, 4), gpu=True, gres=True)
    assert sbatch_argv(SPEC, "mnist-abcde", JOB_DIR, SlurmOptions(), gres, "/w")[5] == "--gres=gpu:4"


def test_the_batch_script_has_the_options_as_sbatch_lines_then_execs_the_launcher() -> None:
    options = ["--nodes=2", "--chdir=/a b", '--comment=it\'s "x" #1']
    sbatch = ["sbatch", "--parsable", *options, "/a b/slurm/batch.sh"]
    script = batch_script("/opt/py env/bin/python", "/a b", sbatch)
    lines = script.splitlines()
    assert lines[:4] == [
        "#!/bin/bash",
        "#SBATCH --nodes=2",
        '#SBATCH "--chdir=/a b"',  # read back by sbatch as one word (tests/slurm/test_jobs.py)
        '#SBATCH "--comment=it\'s \\"x\\" #1"',
    ]
    assert lines[-1] == "exec '/opt/py env/bin/python' -m jupyter_disttrain.backends.slurm.launch '/a b'"
    # No submitted value in a comment of the script's own: only in its #SBATCH lines.
    assert not any("/a b" in line for line in lines if line.startswith("# "))
    with pytest.raises(InvalidSpecError, match="control character"):
        batch_script("/py", "/a\nb", ["sbatch", "--parsable", "/x/batch.sh"])


@pytest.mark.parametrize(
    ("option", "message"),
    [
        # sbatch takes any prefix of an option's name no other option shares: as the option
        ("--outp=/tmp/x", "--sbatch-option --outp=/tmp/x is sbatch's --output, which the backend sets"),
        ("--arr=0-3", "is sbatch's --array, which the backend sets itself"),
        ("--chd=/", "is sbatch's --chdir, which the backend sets itself"),
        ("--tasks-per-node=4", "is sbatch's --ntasks-per-node: the backend sets it from --gpus and --nodes"),
        ("--part=debug", "is sbatch's --partition: use --partition"),
        ("-N3", "is sbatch's --nodes: use --nodes"),
        ("--n=2", "sbatch reads --n as any of --network, --nice, --no-kill"),
        # short options cluster: -sN9 is -s -N 9, -vo/x is -v -o /x
        ("-sN9", "sbatch reads it as several options (-s then -N...)"),
        ("-vo/x", "sbatch reads it as several options (-v then -o...)"),
        # a value in the next word would be the next option, or the batch script
        ("--mail-user", "--mail-user takes a value: write --mail-user=VALUE in one word"),
        ("-d", "-d: --dependency takes a value: write --dependency=VALUE in one word"),
        ("--hold=1", "--hold takes no value"),
        ("--test-only", "sbatch then only tests the job, and submits nothing"),
        ("-M other", "the job would run on another cluster"),
        ("--brand-new", "not an option of sbatch 22.05; if your cluster's sbatch has it"),
        ("-Z", "-Z is not an option of sbatch 22.05"),
    ],
)
def test_an_sbatch_option_is_judged_as_sbatch_reads_it(option: str, message: str) -> None:
    with pytest.raises(InvalidSpecError) as info:
        check_sbatch_option(option)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_an_allowed_sbatch_option_is_written_in_full() -> None:
    assert check_sbatch_option("--mail-t=END") == "--mail-type=END"
    assert check_sbatch_option("-dafterok:12") == "--dependency=afterok:12"
    assert check_sbatch_option("-H") == "--hold"
    assert check_sbatch_option("--signal=B:TERM@50") == "--signal=B:TERM@50"
    assert check_sbatch_option("--brand-new=1") == "--brand-new=1"  # newer than the table, value attached


@pytest.mark.parametrize(
    ("version", "flags"),
    [
        ((22, 5, 8), ["--overlap", "--whole"]),
        ((21, 8, 0), ["--overlap", "--whole"]),
        ((20, 11, 9), ["--overlap"]),
        ((20, 2, 7), []),
    ],
)
def test_each_node_is_one_step_and_shares_the_allocation_as_the_version_allows(
    version: tuple[int, int, int], flags: list[str]
) -> None:
    place = Place(mode=STEP, version=version, gpu=False, allocation="4242")
    base = ["srun", "--jobid=4242", "--job-name=mnist-abcde", "--nodes=1", "--ntasks=1", "--relative=1"]
    assert srun_argv(SPEC, "mnist-abcde", place, 1) == [*base, *flags]
    # A batch job's steps are in the job that runs them: no --jobid.
    assert (
        srun_argv(SPEC, "mnist-abcde", Place(mode=BATCH, version=version, gpu=False), 0)[1]
        == "--job-name=mnist-abcde"
    )


def test_the_node_agent_runs_torchrun_with_c10d_hosted_by_node_0() -> None:
    role = Role("worker", 8, ["--lr", "0.1"])
    assert node_argv("/py", JOB_DIR, 1, 2, 2.0) == [
        "/py",
        "-u",
        "-m",
        "jupyter_disttrain.backends.slurm.node",
        JOB_DIR,
        "1",
        "2",
        "2",
        "--",
    ]
    assert torchrun_argv(SPEC, "mnist-abcde", JOB_DIR, "/py", role, 0) == [
        "/py",
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--rdzv-backend=c10d",
        "--rdzv-id=mnist-abcde",
        "--rdzv-conf=is_host=true",
        "--nproc-per-node=4",
        "--max-restarts=1",
        f"--log-dir={JOB_DIR}/torchelastic",
        "-m",
        "jupyter_disttrain.runtime.worker",
        f"{JOB_DIR}/train.py",
        "--lr",
        "0.1",
    ]
    assert "--rdzv-conf=is_host=false" in torchrun_argv(SPEC, "mnist-abcde", JOB_DIR, "/py", role, 1)


def test_the_dry_run_text_shows_the_sbatch_line_the_script_and_each_step() -> None:
    request = SlurmRequest(
        cwd="/w",
        agents=[AgentCommand(node=0, argv=["srun", "a"], env={"K": "v w"})],
        start=START,
        sbatch=["sbatch", "x.sh"],
        batch_script="#!/bin/bash\nexec launcher\n",
        why="why",
    )
    text = format_request(request)
    assert text.splitlines() == [
        "# why",
        f"# start: {START}",
        "# submitted with:",
        "sbatch x.sh",
        "# ---- slurm/batch.sh ----",
        "#!/bin/bash",
        "exec launcher",
        "# ---- run by the launcher, one job step per node ----",
        "# node 0",
        "env K='v w' \\",
        "  srun a",
    ]


def test_the_request_round_trips_and_reads_as_a_local_request() -> None:
    request = SlurmRequest(cwd="/w", mode=STEP, allocation="7", sbatch=[], slurm_version="22.05.8", why="w")
    assert SlurmRequest.from_json(request.to_json()) == request
    assert LocalRequest.from_json(request.to_json()).cwd == "/w"  # what the local launcher reads


def test_a_warm_request_keeps_its_plan_and_the_dry_run_shows_each_warm_step() -> None:
    # Inside an allocation the launcher forks from each node's warm step (warmstart.py): the
    # request it reads back names the keeper and each node's warm step command line.
    request = SlurmRequest(
        cwd="/w",
        agents=[AgentCommand(node=0, argv=["srun", "a"], env={})],
        start="warm: forked from the warm step on each node",
        warm={"socket": "/run/slurm-7-f.sock", "fingerprint": "f", "preload": [], "env_key": "k"},
        warm_steps=[["srun", "--overlap", "python", "-m", "warmstep"]],
        mode="step",
        allocation="7",
    )
    assert SlurmRequest.from_json(json.loads(json.dumps(request.to_json()))) == request
    text = format_request(request).splitlines()
    assert "# node 0: srun --overlap python -m warmstep" in text
    assert text.index("# ---- and cold, when the warm step cannot take the job: ----") < text.index(
        "# node 0"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"time": "1:2:3:4"}, "--time '1:2:3:4' is not a Slurm time limit; write minutes (90), HH:MM:SS"),
        ({"mem": "lots"}, "--mem 'lots' is not what sbatch takes; write e.g. --mem 64G"),
        ({"partition": "a b"}, "--partition 'a b' is not a Slurm name"),
        ({"cpus_per_gpu": 0}, "--cpus-per-gpu takes a whole number of at least 1"),
        ({"exclusive": "yes"}, "--exclusive is a switch"),
        ({"namespace": "x"}, "the slurm backend has no option --namespace"),
        ({"sbatch_options": ["--nodes=3"]}, "--sbatch-option --nodes=3 is sbatch's --nodes: use --nodes"),
        ({"sbatch_options": ["-p", "x"]}, "--sbatch-option -p is sbatch's --partition: use --partition"),
        ({"sbatch_options": ["--ntasks=8"]}, "the backend sets it from --gpus and --nodes"),
        ({"sbatch_options": ["--output=/tmp/x"]}, "is sbatch's --output, which the backend sets itself"),
        ({"sbatch_options": ["--comment=a\n#SBATCH --x"]}, "give one sbatch option on one line"),
        ({"sbatch_options": ["mail-type=END"]}, "give one sbatch option as one word"),
    ],
)
def test_bad_options_are_refused_in_one_line_naming_the_flag(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidSpecError) as info:
        parse_options(options)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_time_limits_in_every_sbatch_form() -> None:
    forms = {"90": 5400, "10:30": 630, "1:30:00": 5400, "2-0": 172800, "1-2:03": 93780, "1-00:00:05": 86405}
    assert {t: time_seconds(t) for t in forms} == forms
    assert time_seconds("UNLIMITED") is None
    assert check_sbatch_option("--mail-type=END") == "--mail-type=END"
