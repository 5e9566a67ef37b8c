"""The launch contract's names: the variables a training process gets and the files of a job dir.

Every backend, the rank wrapper, the launcher and the server use these names; the values are
built in one place, ``jupyter_disttrain/backends/rankenv.py``. Standard library only: the rank
wrapper imports this inside the training process.
"""

from __future__ import annotations

from typing import TypedDict

# What every training process gets, on every backend (besides torchrun's RANK, WORLD_SIZE...).
JOB_ID_ENV = "DISTTRAIN_JOB_ID"
JOB_DIR_ENV = "DISTTRAIN_JOB_DIR"
TENSORBOARD_DIR_ENV = "DISTTRAIN_TENSORBOARD_DIR"
# Checkpoints (README "Checkpoints"): where a job's ranks save them (``<job dir>/checkpoints``, on
# every backend), and the checkpoint a process starts from (set by ``--resume`` and on a restart;
# unset on a fresh start): ``em.resume_from()`` returns it.
CHECKPOINT_DIR_ENV = "DISTTRAIN_CHECKPOINT_DIR"
RESUME_FROM_ENV = "DISTTRAIN_RESUME_FROM"
# ``--keep-checkpoints N`` (set when N > 0): rank 0's wrapper keeps the newest N complete ones
# (runtime/retention.py), never one that ``CHECKPOINT_PINS_FILE`` names.
KEEP_CHECKPOINTS_ENV = "DISTTRAIN_KEEP_CHECKPOINTS"
# The job's hyper-parameters as a JSON object (set when it has any): em.create_run's default.
HPARAMS_ENV = "DISTTRAIN_HPARAMS"
# ``--out``/``--out-all`` (docs/notebook.md, "Values back in the kernel"): JSON {"rank0": [names], "all":
# [names], "limit": bytes per rank}; the rank wrapper writes them into OUT_DIR (runtime/outvalues.py).
OUT_ENV = "DISTTRAIN_OUT"
# The debugger (docs/notebook.md, "Debugging a rank"): DEBUG_ENV "1" when breakpoint() may open a prompt in
# the notebook (set unless the job turns it off), PDB_ENV "1" for --pdb's post-mortem prompt,
# DEBUG_TIMEOUT_ENV the seconds a prompt waits for an answer before the rank goes on.
DEBUG_ENV = "DISTTRAIN_DEBUG"
PDB_ENV = "DISTTRAIN_PDB"
DEBUG_TIMEOUT_ENV = "DISTTRAIN_DEBUG_TIMEOUT"
# The local backend's bookkeeping: where the rank wrapper writes, and which agent a rank is under.
LOG_DIR_ENV = "DISTTRAIN_LOG_DIR"
NODE_ENV = "DISTTRAIN_NODE"
# A process that is not a torch rank (a parameter server's ``scheduler``, ``server-0``...): its
# replica name, which names its log and record; a rank's is ``rank-<RANK>``.
REPLICA_ENV = "DISTTRAIN_REPLICA"
# A pod's PYTHONPATH entries: its entry script puts them in front of the image's own PYTHONPATH
# (a PYTHONPATH in the pod spec would replace the image's).
PYTHONPATH_ENV = "DISTTRAIN_PYTHONPATH"

# Other libraries' settings a job gets unless the user set them (README "Interop"): MLflow records
# into a SQLite database in the job dir; Lightning's default logger writes into its TensorBoard dir.
MLFLOW_URI_ENV = "MLFLOW_TRACKING_URI"
MLFLOW_DB = "mlflow.db"
LIGHTNING_ROOT_ENV = "PL_TRAINER_DEFAULT_ROOT_DIR"

# Outside a job (a kernel, a plain `python train.py`), em's job dir: ./.disttrain (its checkpoints,
# runs and TensorBoard dirs, with the job store's jobs/ beside them).
LOCAL_DIR = ".disttrain"

# A job dir's own parts.
JOB_FILE = "job.json"  # the job's record (store.py's JobRecord): its spec, ``resumed_from`` included
LOGS_DIR = "logs"
EXITS_DIR = "exits"  # Kubernetes: <replica>.json, written by the pod wrapper at its exit
RANKS_DIR = "ranks"
TENSORBOARD_DIR = "tensorboard"
METRICS_DIR = "metrics"  # <replica>.jsonl: resource samples; monitor.json: how they are taken
MONITOR_FILE = "monitor.json"
CHECKPOINTS_DIR = "checkpoints"
# {"paths": [absolute, ...]}: this job's checkpoints other jobs resumed from (the job layer writes
# it at their submit): retention never deletes them.
CHECKPOINT_PINS_FILE = "checkpoint-pins.json"
OUT_DIR = "out"  # rank-N/<name>.pt, one per value; rank-N.json: the manifest, written last
DEBUG_DIR = "debug"  # <replica>.sock: the rank's debugger while it waits; <replica>.txt: the transcript
# torchrun's --log-dir (and the warm agent's alike): <run id>_<random>/attempt_<K>/<local rank>/error.json,
# a failed rank's uncaught error; in the job dir, not a fresh /tmp dir that nothing removes.
ELASTIC_DIR = "torchelastic"
STACKS_DIR = "stacks"  # <replica>.txt: the faulthandler dumps the rank wrapper writes on STACK_SIGNAL
# The signal on which the rank wrapper dumps every thread's Python stack (faulthandler). torchrun
# neither uses nor forwards it by default (its agent handles TERM, INT, HUP and QUIT).
STACK_SIGNAL = "SIGUSR2"
# <replica>.sock: each rank's Flight Recorder and stacks, served by torch's worker server
# (runtime/debugsock.py); a diagnosis reads them (monitoring/incidents.py).
FLIGHT_RECORDER_DIR = "flightrec"
# <time>-<trigger>.json: each diagnosis of the job, kept under its own name (monitoring/incidents.py).
INCIDENTS_DIR = "incidents"
# What the stall and idle guard last judged of the job (monitoring/guard.py), written by whoever
# guards it: the launcher (local, Slurm) or the server (Kubernetes).
GUARD_FILE = "guard.json"

# Experiment tracking (``em``): ``runs/<run>/run.json``, ``metrics.jsonl`` (``rank-N/metrics.jsonl``
# with ranks="all"), ``artifacts/<artifact>/manifest.json`` and the artifact's files. Written by
# ``em`` inside the training processes, read by the server (``runs.py``).
RUNS_DIR = "runs"
RUN_FILE = "run.json"
METRICS_FILE = "metrics.jsonl"
# How a run's TensorBoard follower is started (``python -c FOLLOWER_ENTRY METRICS LOGDIR``), so
# that a job's end can tell it from the job's other processes. Not ``-m``: runpy warns when the
# package (which imports the module) is imported first.
FOLLOWER_ENTRY = "import sys; from jupyter_disttrain.em.follow import main; main(sys.argv[1:])"
ARTIFACTS_DIR = "artifacts"
MANIFEST_FILE = "manifest.json"
# ``runs/<run>/checkpoints.jsonl``: the checkpoints a script declared with ``run.checkpoint(path,
# step=...)``, one JSON object per line: {"path": absolute, "step": int | null, "time": ISO 8601}.
CHECKPOINTS_FILE = "checkpoints.jsonl"
# Run and artifact names become directory names (and TensorBoard run names).
RUN_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"


def rank_name(rank: int) -> str:
    """A rank's replica name (``rank-0``): its log is ``logs/rank-0.log``, its record
    ``ranks/rank-0.json``."""
    return f"rank-{rank}"


def agent_name(node: int) -> str:
    """A local node's torchrun agent (``agent-0``), whose output is ``logs/agent-0.log``."""
    return f"agent-{node}"


def log_file(replica: str) -> str:
    return f"{replica}.log"


def metrics_file(replica: str) -> str:
    return f"{replica}.jsonl"


def stack_file(replica: str) -> str:
    return f"{replica}.txt"


def flight_recorder_socket(replica: str) -> str:
    return f"{replica}.sock"


def record_file(replica: str) -> str:
    return f"{replica}.json"


def out_manifest(rank: int) -> str:
    """``out/rank-N.json``: what rank N's ``--out`` values are (``OutManifest``)."""
    return f"{rank_name(rank)}.json"


def debug_socket(replica: str) -> str:
    return f"{replica}.sock"


class OutValue(TypedDict):
    """One value that came back: its name, kind (``module``, ``optimizer``, ``value``), type
    (``__qualname__`` and ``__module__``), its file's size and name (``<name>.pt``)."""

    name: str
    kind: str
    type: str
    module: str
    bytes: int
    file: str


class OutRefusal(TypedDict):
    name: str
    why: str


class OutManifest(TypedDict):
    """``out/rank-N.json``: written by rank N's wrapper after its values, the commit point."""

    rank: int
    values: list[OutValue]
    refused: list[OutRefusal]
    time: float


class RankRecord(TypedDict, total=False):
    """``ranks/rank-N.json``: written by the rank wrapper when the rank starts, again at its exit."""

    rank: int
    replica: str  # rank-N for a torch rank, else its DISTTRAIN_REPLICA
    local_rank: int
    node: int
    restarts: int
    pid: int
    host: str
    start_time: str
    exit_code: int  # from here on: at exit
    finish_time: str
    joined_world: int | None  # the size of the process group it joined, if any
    cpu_seconds: float  # user and system CPU time, with the children it reaped (resource-hours)
