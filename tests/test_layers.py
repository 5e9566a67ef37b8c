"""The package's layers (docs/architecture.md), checked on every import statement, lazy ones too.

Every module is declared in ``LAYERS`` by name: a new module joins a layer on purpose (a module
missing from the table fails the test). ``ALLOWED`` says which layers each layer may import;
the model, the storage, the backends and the job layer know nothing of Jupyter (no tornado,
jupyter_server, IPython, ipywidgets or ipykernel); the code that runs inside training processes
imports only its own kind; front ends build on the job layer and never import one another.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "jupyter_disttrain"
JUPYTER = ("tornado", "jupyter_server", "jupyter_server_proxy", "IPython", "ipywidgets", "ipykernel")


# The modules of each layer (dotted, under the package; a package by its own name).
MODULES_OF: dict[str, list[str]] = {
    # Inside the training processes: the rank wrapper, the loopback rendezvous, joined-group
    # tracking, the resource sampler (the local launcher and the pod wrapper run it), the launch
    # contract's names (env variables, the files of a job dir), the atomic JSON writer, what looks
    # like a credential (em's runs and the captured hparams mask it alike).
    "runtime": [
        "runtime",
        "runtime.atomic",
        "runtime.ckptscan",
        "runtime.contract",
        "runtime.debugger",
        "runtime.debugrelay",
        "runtime.debugsock",
        "runtime.importhook",
        "runtime.joined",
        "runtime.libresume",
        "runtime.outvalues",
        "runtime.restarts",
        "runtime.rendezvous",
        "runtime.retention",
        "runtime.regularfile",
        "runtime.sampler",
        "runtime.secrets",
        "runtime.worker",
    ],
    # The user's experiment tracking inside the training processes.
    "em": [
        "em",
        "em.artifact",
        "em.checks",
        "em.exits",
        "em.files",
        "em.follow",
        "em.place",
        "em.resume",
        "em.run",
        "em.sink",
        "em.tb",
    ],
    # The job model (what to run, how it goes, its errors), how its words are typed as flags,
    # how a failure reads (a traceback as the notebook's own error), how far a job is by its
    # output (a tqdm bar), a poller's backoff, and the registries that name the launchers and the
    # backends (each loaded by name on use).
    # (``backends.slurm.allocation``: whether the kernel runs inside a Slurm allocation, from its
    # environment alone; the registry asks it for the default backend, as it asks for a pod's.)
    "model": [
        *("errors", "specs", "flags", "failure", "tracebacks", "progress", "polling"),
        *("launchers", "backends", "_version"),
        "backends.slurm.allocation",
    ],
    # Where jobs live: job dirs and roots, their log files, their processes.
    "storage": ["store", "roots", "safefiles", "logfiles", "procs"],
    # The shapes of the answers (REST, the Python API), typed once.
    "payloads": ["payloads"],
    # The environment every backend gives each process of a job (``launch.rank_env``).
    "launch contract": ["launch"],
    # A spec -> its roles.
    "launchers": [
        "launchers.base",
        "launchers.calls",
        "launchers.torchrun",
        "launchers.deepspeed",
        "launchers.mxnet",
        "launchers.horovod",
        "launchers.horovod_entry",
        "launchers.horovod_local",
    ],
    # A cell -> a standalone script.
    "packaging": [
        "packaging",
        "packaging.capture",
        "packaging.argeffects",
        "packaging.checks",
        "packaging.explain",
        "packaging.history",
        "packaging.keyreads",
        "packaging.loadcell",
        "packaging.lightning_pitfalls",
        "packaging.origins",
        "packaging.outnames",
        "packaging.pitfalls",
        "packaging.replay",
        "packaging.resolve",
        "packaging.scopes",
        "packaging.sourcetext",
        "packaging.values",
    ],
    # A job's runs read back (em's, MLflow's, its own), its hyper-parameters, MLflow into TensorBoard.
    "tracking": [
        "tracking",
        "tracking.checkpoints",
        "tracking.continued",
        "tracking.hparams",
        "tracking.mlflowdb",
        "tracking.mlflowtb",
        "tracking.runs",
        "tracking.sources",
    ],
    # A running job watched from outside: resource samples, liveness, stacks; its diagnoses (the
    # ranks' Flight Recorders analysed, the verdict, the incidents kept).
    "monitoring": [
        *("monitoring", "monitoring.resources", "monitoring.stacks"),
        *("monitoring.flightrec", "monitoring.verdict", "monitoring.incidents", "monitoring.guard"),
        "monitoring.usage",
    ],
    # Where jobs run: the Backend base, this machine, a Kubernetes cluster, a Slurm cluster.
    "backends": [
        "backends.base",
        "backends.debugaccess",
        "backends.local",
        "backends.local.backend",
        "backends.local.launch",
        "backends.local.supervisor",
        "backends.local.diagnosis",
        "backends.local.guarding",
        "backends.local.records",
        "backends.local.sidethreads",
        "backends.local.options",
        "backends.local.python",
        "backends.local.request",
        "backends.local.roles",
        "backends.local.exits",
        "backends.local.torchrun",
        "backends.local.warm",
        "backends.local.zygote",
        "backends.local.forked",
        "backends.kubernetes",
        "backends.kubernetes.backend",
        "backends.kubernetes.claims",
        "backends.kubernetes.client",
        "backends.kubernetes.exits",
        "backends.kubernetes.informer",
        "backends.kubernetes.manifests",
        "backends.kubernetes.notebook",
        "backends.kubernetes.objects",
        "backends.kubernetes.options",
        "backends.kubernetes.pending",
        "backends.kubernetes.planning",
        "backends.kubernetes.podexec",
        "backends.kubernetes.podlogs",
        "backends.kubernetes.podmetrics",
        "backends.kubernetes.podruntime",
        "backends.kubernetes.podrelay",
        "backends.kubernetes.podscript",
        "backends.kubernetes.podsecurity",
        "backends.kubernetes.reconcile",
        "backends.kubernetes.request",
        "backends.kubernetes.status",
        "backends.kubernetes.flavors",
        "backends.kubernetes.flavors.base",
        "backends.kubernetes.flavors.job",
        "backends.kubernetes.flavors.pytorchjob",
        "backends.kubernetes.flavors.t9k",
        "backends.slurm",
        "backends.slurm._local",
        "backends.slurm.backend",
        "backends.slurm.checks",
        "backends.slurm.client",
        "backends.slurm.launch",
        "backends.slurm.node",
        "backends.slurm.onnode",
        "backends.slurm.options",
        "backends.slurm.parse",
        "backends.slurm.request",
        "backends.slurm.sbatchargs",
        "backends.slurm.script",
        "backends.slurm.stacks",
        "backends.slurm.states",
        "backends.slurm.status",
        "backends.slurm.stop",
    ],
    # A spec from words, flags or JSON; the flags from every registered backend and launcher.
    "intake": ["intake"],
    # Job operations, and the Python API over them.
    "job layer": [
        "manager",
        "api",
        "warmup",
        "failures",
        "jobprogress",
        "jobcheckpoints",
        "joberrors",
        "jobvalues",
        "debugging",
        "jobdiagnosis",
        "jobguard",
    ],
    # The subcommands the line magic and the CLI share.
    "commands": ["commands"],
    "front:magic": ["magics", "widgets", "progressview", "kernelenv", "kernelvalues", "debugview"],
    "front:cli": ["cli"],
    "front:server": [
        "server",
        "server.app",
        "server.caching_store",
        "server.checkpoints",
        "server.context",
        "server.debug",
        "server.diagnosis",
        "server.handlers",
        "server.jobs",
        "server.proxy",
        "server.routes",
        "server.tb_exec",
        "server.tb_serve",
        "server.tensorboard",
    ],
    # What Python, Jupyter and pods load by name: the package (%load_ext, the server extension)
    # and the MLflow follower's name in the pod wrapper (an image's own jupyter_disttrain).
    "entry points": ["__init__", "mlflowtb"],
}
LAYERS = {module: layer for layer, modules in MODULES_OF.items() for module in modules}
# What each layer may import from the package.
ALLOWED: dict[str, set[str]] = {
    "runtime": {"runtime"},
    # Experiment tracking runs inside the training processes like the runtime, but it is the
    # user's API, not the launcher's: its own layer, on the runtime's names only, so a script
    # importing it pulls in none of the job machinery (and no Jupyter).
    "em": {"em", "runtime"},
    "model": {"model", "runtime"},
    "storage": {"model", "runtime", "storage"},
    "payloads": {"model", "storage", "payloads"},
    "launch contract": {"model", "runtime", "launch contract"},
    "launchers": {"model", "runtime", "launchers"},
    # The hyper-parameters a cell uses are captured with it (``tracking.hparams``).
    "packaging": {"model", "tracking", "packaging"},
    "tracking": {"model", "runtime", "storage", "payloads", "tracking"},
    "monitoring": {"model", "runtime", "storage", "payloads", "monitoring"},
    "backends": {
        *("model", "runtime", "storage", "payloads", "launch contract", "launchers"),
        *("tracking", "monitoring", "backends"),  # the launcher's MLflow follower; samples, stacks
    },
    # The registries give each backend's and launcher's options; no backend is imported.
    "intake": {"model", "launchers", "intake"},
    "job layer": {
        *("model", "runtime", "storage", "payloads", "launchers", "packaging", "tracking"),
        *("monitoring", "backends", "intake", "job layer"),
    },
    "commands": {"model", "storage", "monitoring", "packaging", "intake", "job layer", "commands"},
    "front:magic": {
        *("model", "payloads", "launchers", "packaging", "intake", "job layer", "commands", "front:magic"),
    },
    "front:cli": {"model", "commands", "front:cli"},
    "front:server": {"model", "storage", "payloads", "intake", "job layer", "front:server"},
    "entry points": {"tracking", "job layer", "front:magic", "front:server"},
}
NO_JUPYTER = set(ALLOWED) - {"front:magic", "front:server", "entry points"}
# Imports that are no dependency, each with its reason.
EXEMPT = {
    # The registries annotate what they load by name with its base class (type checking only).
    ("launchers", "launchers.base"),
    ("backends", "backends.base"),
    ("backends", "store"),
    # The server's info answer says the package's version.
    ("server.handlers", "__init__"),
}


def layer_of(module: str) -> str:
    if module not in LAYERS:
        raise AssertionError(f"{module} is not in tests/test_layers.py's LAYERS: give it a layer")
    return LAYERS[module]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


SOURCES = sorted(PACKAGE.rglob("*.py"))
MODULES = {module_name(p) for p in SOURCES}


def _ours(name: str) -> str:
    """The module ``name`` is, or the package (``__init__`` at the top) whose attribute it is."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or "__init__"


def imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, module, is ours) of every import in ``path``; ours relative to the package."""
    module = module_name(path)
    package = module.split(".")[:-1] if path.name != "__init__.py" else module.split(".")
    if module == "__init__":
        package = []
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                ours = alias.name.startswith("jupyter_disttrain")
                name = alias.name.removeprefix("jupyter_disttrain").lstrip(".")
                found.append((node.lineno, _ours(name) if ours else name, ours))
        elif isinstance(node, ast.ImportFrom):
            if node.level or (node.module or "").startswith("jupyter_disttrain"):
                if node.level:
                    base = package[: len(package) - node.level + 1]
                else:
                    base = (node.module or "").removeprefix("jupyter_disttrain").lstrip(".").split(".")
                target = ".".join([*base, *((node.module or "").split(".") if node.level else [])])
                target = target.strip(".")
                # from . import api, errors: each name a module (or an attribute of the package)
                names = [_ours(f"{target}.{a.name}".strip(".")) for a in node.names]
                found += [(node.lineno, name, True) for name in dict.fromkeys(names)]
            else:
                found.append((node.lineno, node.module or "", False))
    return found


def test_every_module_has_a_layer_and_the_table_is_whole() -> None:
    assert sorted(MODULES - set(LAYERS)) == []  # a new module: declare its layer
    assert sorted(set(LAYERS) - MODULES - {"_version"}) == []  # (written by the build, gitignored)
    assert sum(map(len, MODULES_OF.values())) == len(LAYERS)  # none declared twice
    assert set(LAYERS.values()) == set(ALLOWED)
    assert all(allowed <= set(ALLOWED) for allowed in ALLOWED.values())


def test_the_layers_have_no_cycle() -> None:
    # Each layer may import only itself and layers below it: an order exists.
    below = {layer: allowed - {layer} for layer, allowed in ALLOWED.items()}
    ordered: list[str] = []
    while below:
        ready = sorted(layer for layer, deps in below.items() if deps <= set(ordered))
        assert ready, f"a cycle among {sorted(below)}"
        ordered += ready
        for layer in ready:
            del below[layer]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_follow_the_layers(path: Path) -> None:
    module = module_name(path)
    layer = layer_of(module)
    wrong = []
    for line, target, ours in imports(path):
        if ours:
            if layer_of(target) not in ALLOWED[layer] and (module, target) not in EXEMPT:
                wrong.append(f"line {line}: {layer} imports {target} ({layer_of(target)})")
        elif layer in NO_JUPYTER and target.split(".")[0] in JUPYTER:
            wrong.append(f"line {line}: {layer} imports {target}")
    assert wrong == []


def test_the_checker_sees_relative_and_lazy_imports() -> None:
    # A checker that saw nothing would pass everything: it must resolve what the modules import.
    seen = {target for _, target, ours in imports(PACKAGE / "magics.py") if ours}
    assert {"api", "commands", "widgets", "specs"} <= seen  # some of them inside functions
    seen = {target for _, target, ours in imports(PACKAGE / "backends" / "local" / "supervisor.py") if ours}
    assert {"procs", "runtime.joined", "backends.local.diagnosis", "launchers"} <= seen  # launchers: lazy
    seen = {target for _, target, ours in imports(PACKAGE / "backends" / "local" / "backend.py") if ours}
    assert "backends" in seen  # from .. import option_owner: the registry, not a module of that name
    assert layer_of("server.handlers") == "front:server" and layer_of("specs") == "model"
