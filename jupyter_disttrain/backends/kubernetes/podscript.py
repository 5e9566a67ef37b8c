"""The pod's entry scripts: constants, so user values (paths, ids, torchrun arguments) only
ever travel as argv and no shell string is built from them."""

from __future__ import annotations

from pathlib import Path

from ...runtime import contract, sampler
from . import podruntime

# The pod's PID 1: runs the launcher, copies its output to stdout (pods/log) and, when the job
# dir is on the shared PVC, to <job_dir>/logs/<replica>.log so the output outlives the pod, and
# records its end in <job_dir>/exits/<replica>.json: the job's verdict once a TTL removed the
# workload (and its pods) before anyone looked. Its own notices (say) go the same way, so the
# job's logs show them; the exit record also says whether the ranks ran under the rank wrapper.
# torchrun exits 1 whichever rank failed; the wrapper exits with the failed rank's own code,
# read from the "Root Cause" of torchrun's failure report at the end of the output.
# The job ships its runtime (podruntime.py: a zip beside the script, argv "runtime"): torchrun's
# ranks run under its rank wrapper, as on this machine (the libraries get DISTTRAIN_RESUME_FROM
# and the checkpoint dir without code, an uncaught error writes the em runs out, a finished rank
# skips the interpreter's teardown), whatever jupyter_disttrain the image has, if any.
# A pod that replaces an earlier one of its replica (an eviction, a drain, a failure the Job
# retries: its log file on the PVC is already there) gives its ranks DISTTRAIN_RESUME_FROM = the
# job's newest complete checkpoint (the runtime's restarts.py); rank 0's replica keeps the newest
# --keep-checkpoints of them (its retention.py), which the rank wrapper then leaves to this one.
# With the job dir on the PVC it also samples the pod's ranks (torchrun's children, named by their
# RANK) into <job_dir>/metrics/rank-N.jsonl, as the local launcher does (a process role's pod, which
# runs the script itself, samples that process as its replica: metrics/server-0.jsonl): the source of
# runtime/sampler.py goes in front of the wrapper (self-contained: psutil and NVML are imported
# when used, and an image without psutil gets one line and no samples). The pod of rank 0's replica
# (argv "rank0") also follows the job's mlflow.db into its TensorBoard dir (mlflowtb, imported from
# the image's jupyter_disttrain: without it, one line), stopped after torchrun, before the exit record.
_WRAPPER = """\
import importlib, json, os, re, shutil, signal, socket, subprocess, sys, tempfile, threading, time
log_dir, exit_dir, prefix, job_id, rank0, runtime, _, *cmd = sys.argv[1:]
host = os.environ.get("HOSTNAME") or socket.gethostname()
replica = prefix + (host[len(job_id) + 1:] if host.startswith(job_id + "-") else host)
if prefix.startswith("="):
    replica = prefix[1:]
direct = cmd[0] == SAME_PYTHON  # one process of a role, no torchrun: it is the replica
if direct:
    cmd[0] = sys.executable
out, tail, lock = None, b"", threading.Lock()
def emit(chunk):
    global tail
    with lock:
        tail = (tail + chunk)[-65536:]
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        if out:
            out.write(chunk)
def say(line):
    emit(f"jupyter-disttrain: {line}\\n".encode())
def shipped(module):  # a module of the job's own runtime
    return importlib.import_module(RUNTIME_PACKAGE + "." + module)
def hold_pool(code):  # --keep-warm: this pod becomes a pool pod (poolpod.py), keeping its PID
    try:
        importlib.import_module(POOL_MODULE)
    except ImportError as exc:
        say(f"not kept warm: this image has no jupyter_disttrain to hold a zygote ({exc})")
        sys.exit(code)
    sys.stdout.flush()
    if out:
        out.close()
    os.execv(sys.executable, [sys.executable, "-u", "-m", POOL_MODULE, "serve", keep, replica[len(prefix):]])
keep, pool_plan = os.environ.get(POOL_KEEP_ENV), os.environ.get(POOL_PLAN_ENV)
if keep and not pool_plan and exit_dir != "-" and os.path.exists(os.path.join(exit_dir, replica + ".json")):
    # A pod that replaces a kept one (evicted, drained): the job ended already; this one holds the pool.
    hold_pool(0)
has_runtime = os.path.isfile(runtime)
if has_runtime:
    sys.path.insert(0, runtime)
if log_dir != "-":
    os.makedirs(log_dir, exist_ok=True)
    pod_log = os.path.join(log_dir, replica + ".log")
    replaced = os.path.exists(pod_log)  # an earlier pod of this replica ran: this one replaces it
    out = open(pod_log, "ab", buffering=0)
    if replaced:  # its ranks start from the job's newest complete checkpoint, when it has one
        try:
            if shipped("restarts").resume_from_newest(os.path.dirname(log_dir), say) is None:
                say("replaced pod: the job has no complete checkpoint yet; the script starts over")
        except Exception as exc:
            say(f"replaced pod, no checkpoint to resume from: {exc}")
# A process role's one process is the replica: named by REPLICA_ENV, as on this machine.
child_env = dict(os.environ, **{REPLICA_ENV: replica}) if direct else None
if direct:
    rank_wrapper = "none: this replica's one process is the script (no torchrun)"
elif cmd[:len(TORCHRUN)] != TORCHRUN:
    rank_wrapper = "none: the ranks are not started by torchrun"
elif not has_runtime:
    rank_wrapper = f"none: the job's runtime {runtime} is not in this pod"
    say(f"ranks run without the rank wrapper: the job's runtime {runtime} is not in this pod")
else:
    cmd[len(TORCHRUN):len(TORCHRUN)] = ["-m", RUNTIME_PACKAGE + ".worker"]
    # --keep-checkpoints stays this wrapper's (rank 0's replica prunes below), not rank 0's too.
    child_env = {k: v for k, v in os.environ.items() if k != KEEP_ENV}
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (runtime, os.environ.get("PYTHONPATH")) if p)
    rank_wrapper = f"{RUNTIME_PACKAGE}.worker, this job's own release ({runtime})"
# torchrun's --log-dir (its --tee copies of the ranks' output, their error files): in the pod's
# own /tmp, removed when torchrun ends, not kept for a pool pod's life (the job's log is pod_log).
elastic = None
if cmd[:len(TORCHRUN)] == TORCHRUN:
    elastic = tempfile.mkdtemp(prefix="torchelastic_")
    cmd[len(TORCHRUN):len(TORCHRUN)] = ["--log-dir", elastic]
child = None  # a job forked in a kept pod (pool_plan) gets its agent from the pod's zygote
if pool_plan and rank_wrapper.startswith(RUNTIME_PACKAGE) and out:
    child_env.pop(POOL_PLAN_ENV, None)
    try:
        from jupyter_disttrain.backends.kubernetes.poolpod import fork_agent
        child = fork_agent(pool_plan, cmd, child_env, pod_log)
        rank_wrapper = "jupyter_disttrain.runtime.worker, the image's: forked from this pool pod's zygote"
    except Exception as exc:
        say(f"torchrun starts afresh in this pool pod: the zygote gave no agent ({exc})")
try:
    if child is None:
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=child_env)
except FileNotFoundError:
    hint = " is not on PATH in this image; use an image with PyTorch (--image)"
    emit(f"jupyter-disttrain: {cmd[0]}{hint}\\n".encode())
    sys.exit(127)
stopped_by = []
def forward(num, frame):
    stopped_by.append(signal.Signals(num).name)
    child.send_signal(num)
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, forward)
def sample_ranks():
    try:
        import psutil
    except ImportError:
        return say("no resource samples: psutil is not installed in this image")
    pod_log, ranks_of = os.path.join(log_dir, replica + ".log"), {}
    def ranks():
        if direct:
            return {replica: child.pid} if child.poll() is None else {}
        found = {}
        try:
            workers = psutil.Process(child.pid).children()
        except psutil.Error:
            return found
        for w in workers:
            if w.pid not in ranks_of:
                try:
                    ranks_of[w.pid] = w.environ().get("RANK")
                except psutil.Error:
                    continue
            if ranks_of[w.pid] is not None:
                found["rank-" + ranks_of[w.pid]] = w.pid
        return found
    gpus = os.environ.get("NVIDIA_VISIBLE_DEVICES", "none") not in ("", "none", "void")
    metrics = os.path.join(os.path.dirname(log_dir), "metrics")
    Monitor(metrics, INTERVAL, ranks, lambda r: pod_log, say, gpus=gpus).start()
if log_dir != "-":
    try:
        sample_ranks()
    except Exception as exc:  # never the job's failure
        say(f"no resource samples: {exc}")
mlflow_tb = None
if log_dir != "-" and replica == rank0:
    try:
        from jupyter_disttrain.mlflowtb import follow
        mlflow_tb = follow(os.path.dirname(log_dir), say)
    except Exception as exc:
        say(f"MLflow metrics are not written into TensorBoard: {exc}")
if log_dir != "-" and replica == rank0 and os.environ.get(KEEP_ENV):
    try:  # --keep-checkpoints: prunes while the ranks run and once as this wrapper exits
        shipped("retention").start(0)
    except Exception as exc:
        say(f"--keep-checkpoints is not applied: {exc}")
if getattr(child, "stdout", None) is not None:
    for chunk in iter(lambda: child.stdout.read1(65536), b""):
        emit(chunk)
def exit_code(code):
    _, root, report = tail.rpartition(b"Root Cause (first observed failure):")
    rank = re.search(rb"exitcode\\s*:\\s*(-?\\d+)", report) if code and root else None
    code = int(rank.group(1)) if rank and int(rank.group(1)) else code
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell reports it
def record(code):
    if exit_dir == "-":
        return
    os.makedirs(exit_dir, exist_ok=True)
    path = os.path.join(exit_dir, replica + ".json")
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    end = {"exit_code": code, "finish_time": when, "signal": (stopped_by or [None])[0]}
    with open(path + ".tmp", "w") as f:
        json.dump({**end, "rank_wrapper": rank_wrapper}, f)
    os.replace(path + ".tmp", path)
returned = child.wait()
if elastic:
    shutil.rmtree(elastic, ignore_errors=True)
if getattr(child, "stdout", None) is None:  # a forked agent wrote its output to the log itself
    with open(pod_log, "rb") as f:
        f.seek(max(0, os.path.getsize(pod_log) - 65536))
        tail = f.read()
code = exit_code(returned)
if mlflow_tb:
    mlflow_tb.stop()
try:
    record(code)
except OSError as exc:  # the verdict is also in the pod's status while the pod exists
    say(f"cannot record the exit in {exit_dir}: {exc}")
if keep and not pool_plan and not stopped_by:
    hold_pool(code)
sys.exit(code)
"""
# The first word of a command the wrapper runs with its own interpreter (the image's python, as
# found below): a process role's script, which no torchrun starts.
SAME_PYTHON = "{python}"
# A kept pod (--keep-warm): seconds it stays idle, set on its container; then its wrapper becomes
# POOL_MODULE's pool server, which gives each job forked there its zygote's plan in POOL_PLAN_ENV.
POOL_KEEP_ENV = "DISTTRAIN_POOL_KEEP"
POOL_PLAN_ENV = "DISTTRAIN_POOL_ZYGOTE"
POOL_MODULE = "jupyter_disttrain.backends.kubernetes.poolpod"
POOL_ENV_NAMES_ENV = "DISTTRAIN_POOL_ENV_NAMES"  # the container's own variables: a forked job drops them
# How a pod starts its ranks: ``TORCHRUN SCRIPT ARGS``; the wrapper puts ``-m <the shipped rank
# wrapper>`` after it.
TORCHRUN = ["torchrun", "--tee", "3"]
POD_WRAPPER = (
    Path(sampler.__file__).read_text(encoding="utf-8")
    + f"INTERVAL = {sampler.DEFAULT_INTERVAL!r}\nSAME_PYTHON = {SAME_PYTHON!r}\n"
    + f"REPLICA_ENV = {contract.REPLICA_ENV!r}\n"
    + f"KEEP_ENV = {contract.KEEP_CHECKPOINTS_ENV!r}\n"
    + f"TORCHRUN = {TORCHRUN!r}\nRUNTIME_PACKAGE = {podruntime.PACKAGE!r}\n"
    + f"POOL_KEEP_ENV = {POOL_KEEP_ENV!r}\nPOOL_PLAN_ENV = {POOL_PLAN_ENV!r}\nPOOL_MODULE = {POOL_MODULE!r}\n"
    + _WRAPPER
)

# Puts the job's PYTHONPATH in front of the image's, then runs the image's Python, found as
# torchrun is (on PATH: python3, python), else the interpreter of torchrun's own "#!" line;
# without any, it says so. Its arguments are Python's: "-c WRAPPER ARGS..." (a pod's entry), or
# "SCRIPT ARGS..." (each rank of a T9k pod, whose controller runs torchrun itself); user values
# never enter the script.
FIND_PYTHON = """\
set -f
torchrun_python() {
  t=$(command -v torchrun) && IFS= read -r line < "$t" || return 0
  case $line in '#!'*) set -- ${line#??}; [ "${1##*/}" = env ] && shift; echo "$1";; esac
}
export PYTHONPATH="$DISTTRAIN_PYTHONPATH${PYTHONPATH:+:$PYTHONPATH}"
for py in python3 python "$(torchrun_python)"; do
  if [ -n "$py" ] && command -v "$py" >/dev/null 2>&1; then
    exec "$py" -u "$@"
  fi
done
echo "$0: this image has no python3 or python on PATH, nor a torchrun to find one by;" \\
  "use an image with Python and PyTorch (--image)" >&2
exit 127
"""
PYTHON_LAUNCH = ("/bin/sh", "-c", FIND_PYTHON, "jupyter-disttrain")

# Run in a pod through pods/exec: the Python stacks of each rank of this job in the pod (the
# processes whose environment names the job and a RANK, or a process role's replica, on this
# pod's host), by py-spy. argv: the job id. Exit 3 when the image has no py-spy.
POD_STACKS = (
    f"REPLICA_ENV = {contract.REPLICA_ENV!r}\n"
    + """\
import os, shutil, subprocess, sys
spy = shutil.which("py-spy")
if spy is None:
    sys.exit("py-spy is not installed in this image: add it (pip install py-spy) to read stacks")
job, host, found = sys.argv[1], os.environ.get("HOSTNAME"), 0
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(v.split("=", 1) for v in f.read().decode("utf-8", "replace").split("\\0") if "=" in v)
    except OSError:
        continue
    name = "rank-" + env["RANK"] if "RANK" in env else env.get(REPLICA_ENV)
    if env.get("DISTTRAIN_JOB_ID") != job or not name or env.get("HOSTNAME") != host:
        continue
    found += 1
    done = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
    print(f"==== {name} (pid {pid}) ====", flush=True)
    print(done.stdout if done.returncode == 0 else f"py-spy failed: {done.stderr.strip()}", flush=True)
if not found:
    sys.exit("no process of this job runs in this pod")
"""
)

# Run in a pod through pods/exec: what each rank's debug socket in this pod answers (its Flight
# Recorder and stacks), as JSON, by the job's own runtime (argv: the runtime's archive, then the
# job dir the ranks' sockets are in, expanded here: $DISTTRAIN_JOB_DIR in the job's own pod, the
# job's own path in a pool pod, whose variable is its first job's).
POD_DIAGNOSE = f"""\
import os, sys
sys.path.insert(0, sys.argv[1])
from {podruntime.PACKAGE}.debugsock import main
sys.exit(main([os.path.expandvars(sys.argv[2])]))
"""

# Run in a pool pod through pods/exec (the notebook's only way in): one request (argv, JSON) to
# the pod's pool server (poolpod.py) on its Unix socket, in the private dir ``poolpod.pool_dir``
# makes; its answer, one JSON line on stdout (exit 0 either way: a refusal is an answer). Standard
# library only, so an exec costs an interpreter's start, not this package's import.
POOL_RELAY = """\
import json, os, socket, sys
base = os.environ.get("XDG_RUNTIME_DIR")
root = os.path.join(base, "jupyter_disttrain") if base else f"/tmp/jupyter_disttrain-{os.getuid()}"
host = os.environ.get("HOSTNAME") or socket.gethostname()
path = os.path.join(root, f"k8s-{host}"[:60], "pool.sock")
try:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)
        conn.connect(path)
        conn.sendall(sys.argv[1].encode() + b"\\n")
        data = b""
        while b"\\n" not in data and len(data) < 1 << 20:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    print(data.partition(b"\\n")[0].decode(), flush=True)
except OSError as exc:
    print(json.dumps({"ok": False, "error": f"this pod holds no pool now: {exc}"}), flush=True)
"""
