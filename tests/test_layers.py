"""The package's layers (docs/architecture.md), checked on every import statement, lazy ones too.

A folder of the package is one layer (``FOLDERS``): a module added to it joins that layer. The
root keeps a few modules, each named in ``ROOT`` (a module added there fails the test until it is
named, or moved into its folder); ``OVERRIDES`` names the few whose layer is not their folder's,
with the reason. ``ALLOWED`` says which layers each layer may import;
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


# The package's folders, each one layer: a module added to a folder joins its layer.
FOLDERS: dict[str, str] = {
    # Inside the training processes: the rank wrapper, the loopback rendezvous, joined-group
    # tracking, the resource sampler (the local launcher and the pod wrapper run it), the launch
    # contract's names (env variables, the files of a job dir), the atomic JSON writer, the
    # checkpoint model, what looks like a credential (em's runs and the captured hparams mask it
    # alike). Standard library only: the Kubernetes pods get it shipped with the job.
    "runtime": "runtime",
    # The user's experiment tracking inside the training processes.
    "em": "em",
    # The job model (what to run, how it goes, its errors), how its words are typed as flags,
    # what a status says of a failure and of progress, a rank's traceback and stack dump read as
    # text (the job layer's failure story and debugger and the monitoring's diagnosis read it), a
    # poller's backoff.
    "model": "model",
    # Where jobs live: job dirs and roots, their log files, their processes.
    "storage": "storage",
    # The shapes of the answers (REST, the Python API), typed once, by area.
    "payloads": "payloads",
    # A spec -> its roles.
    "launchers": "launchers",
    # A cell -> a standalone script.
    "packaging": "packaging",
    # A job's runs read back (em's, MLflow's, its own), its hyper-parameters, MLflow into
    # TensorBoard, its checkpoint index.
    "tracking": "tracking",
    # A running job watched from outside: resource samples, liveness, stacks; its diagnoses (the
    # ranks' Flight Recorders analysed, the verdict, the incidents kept), the stall and idle
    # guard's judgement, resource-hours.
    "monitoring": "monitoring",
    # Where jobs run: the Backend base, the rank environment, this machine, a Kubernetes
    # cluster, a Slurm cluster.
    "backends": "backends",
    # Job operations (JobManager), a spec from words, flags or JSON, and each feature's job-level
    # part: a failure's story and what a followed job raises, progress, checkpoints and resume,
    # warm start from the front ends, --out values, a rank's debugger, diagnosis and the server's
    # guard.
    "jobs": "job layer",
    # %%distrun, the view under the cell (a rank's pdb prompt in it), what the kernel carries
    # into a job and gets back.
    "notebook": "front:magic",
    "server": "front:server",
}
# The root's few modules, named one by one.
ROOT: dict[str, str] = {
    # What Python, Jupyter and pods load by name: the package (%load_ext, the server extension)
    # and the MLflow follower's name in the pod wrapper (an image's own jupyter_disttrain).
    "__init__": "entry points",
    "mlflowtb": "entry points",
    "_version": "model",  # the package's version (imports nothing: the server's info answer reads it)
    # The Python API (README: ``jupyter_disttrain.api``), over the job layer.
    "api": "job layer",
    # The subcommands the line magic and the CLI share; the CLI's main.
    "commands": "commands",
    "cli": "front:cli",
}
MAX_ROOT_MODULES = 12
# Modules whose layer is not their folder's, each with its reason.
OVERRIDES: dict[str, str] = {
    # The registries that name the launchers and the backends (each loaded by name on use): the
    # model, the intake and the job layer ask them without loading a launcher or a backend.
    "launchers": "model",
    "launchers.names": "model",  # the launchers' names, data only (the registry's table)
    "backends": "model",
    "backends.registry": "model",  # the registry's names and options classes (the package's half)
    # Whether the kernel runs inside a Slurm allocation, from its environment alone: the registry
    # asks it for the default backend, as it asks for a pod's.
    "backends.slurm.allocation": "model",
}
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
    "launchers": {"model", "runtime", "launchers"},
    # The hyper-parameters a cell uses are captured with it (``tracking.hparams``).
    "packaging": {"model", "tracking", "packaging"},
    "tracking": {"model", "runtime", "storage", "payloads", "tracking"},
    "monitoring": {"model", "runtime", "storage", "payloads", "monitoring"},
    "backends": {
        *("model", "runtime", "storage", "payloads", "launchers"),
        *("tracking", "monitoring", "backends"),  # the launcher's MLflow follower; samples, stacks
    },
    # The intake (a spec from words, flags or JSON) asks the registries for each backend's and
    # launcher's options; no backend is imported.
    "job layer": {
        *("model", "runtime", "storage", "payloads", "launchers", "packaging", "tracking"),
        *("monitoring", "backends", "job layer"),
    },
    "commands": {"model", "storage", "monitoring", "packaging", "job layer", "commands"},
    "front:magic": {
        *("model", "payloads", "launchers", "packaging", "job layer", "commands", "front:magic"),
    },
    "front:cli": {"model", "commands", "front:cli"},
    "front:server": {"model", "storage", "payloads", "job layer", "front:server"},
    "entry points": {"model", "tracking", "job layer", "front:magic", "front:server"},
}
NO_JUPYTER = set(ALLOWED) - {"front:magic", "front:server", "entry points"}
# Imports that are no dependency, each with its reason.
EXEMPT = {
    # The registries annotate what they load by name with its base class (type checking only).
    ("launchers", "launchers.base"),
    ("backends", "backends.base"),
    ("backends", "storage.store"),
}


def layer_of(module: str) -> str:
    """The module's layer: its own (OVERRIDES), else its folder's, else the root's table's."""
    if module in OVERRIDES:
        return OVERRIDES[module]
    folder = module.split(".")[0]
    if folder in FOLDERS:
        return FOLDERS[folder]
    if module not in ROOT:
        raise AssertionError(
            f"{module} is a module of the package root, which keeps at most {MAX_ROOT_MODULES}: "
            "put it in the folder of its layer (or name it in tests/test_layers.py's ROOT)"
        )
    return ROOT[module]


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
    for module in MODULES:
        layer_of(module)  # a module of the root must be named in ROOT
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(FOLDERS)  # a new folder: say which layer it is
    assert sorted((set(ROOT) | set(OVERRIDES)) - MODULES) == []  # none stale
    assert set(FOLDERS.values()) | set(ROOT.values()) | set(OVERRIDES.values()) == set(ALLOWED)
    assert all(allowed <= set(ALLOWED) for allowed in ALLOWED.values())


def test_the_root_keeps_only_the_package_face() -> None:
    root = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, root
    assert set(root) <= set(ROOT)
    # a module added to a folder joins its layer without being named anywhere
    assert layer_of("jobs.anything_new") == "job layer" and layer_of("storage.x") == "storage"


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
    seen = {target for _, target, ours in imports(PACKAGE / "notebook" / "magics.py") if ours}
    assert {"api", "commands", "notebook.widgets", "model.specs"} <= seen  # some inside functions
    seen = {target for _, target, ours in imports(PACKAGE / "backends" / "agents" / "supervisor.py") if ours}
    assert {"storage.procs", "runtime.joined", "backends.agents.diagnosis", "launchers"} <= seen  # lazy
    seen = {target for _, target, ours in imports(PACKAGE / "backends" / "kubernetes" / "client.py") if ours}
    assert "backends" in seen  # from .. import KUBERNETES_EXTRA: the package, not a module of that name
    assert layer_of("server.handlers") == "front:server" and layer_of("model.specs") == "model"


# Packages of ``backends/`` that are no backend: what several backends share, which every backend
# may import and which imports no backend's package (the process agents: the launcher's start,
# its request, torchrun's command line, the supervisor and its options; warm start: the zygote,
# what it forks, a launcher's side of it, which the local backend and Slurm's warm steps use).
# A shared package may build on another.
SHARED_BACKEND_PACKAGES = {"agents", "warm"}


def backend_trespass(module: str, target: str) -> str | None:
    """Why ``module`` may not import ``target``: a backend's package (``backends/local/``,
    ``backends/slurm/``...) imports its own modules, the shared packages and the modules of
    ``backends/`` itself (the base, the rank env, the registry), never another backend's; a
    shared package imports no backend's (another shared package's it may). None when it may."""
    mine, theirs = module.split("."), target.split(".")
    if mine[0] != "backends" or theirs[0] != "backends" or len(mine) < 3 or len(theirs) < 3:
        return None  # not inside a package of backends/, or a module of backends/ itself
    if mine[1] == theirs[1] or theirs[1] in SHARED_BACKEND_PACKAGES:
        return None
    return (
        f"{module} imports {target}: a backend's own module (share it through backends/agents/ or the like)"
    )


@pytest.mark.parametrize("path", [p for p in SOURCES if module_name(p).startswith("backends.")], ids=str)
def test_no_backend_imports_another_backends_modules(path: Path) -> None:
    module = module_name(path)
    wrong = [
        f"line {line}: {why}"
        for line, target, ours in imports(path)
        if ours and (why := backend_trespass(module, target))
    ]
    assert wrong == []


def test_the_backend_rule_refuses_what_it_should() -> None:
    # The Slurm backend once imported the local backend's launcher through a module of its own.
    assert backend_trespass("backends.slurm._local", "backends.local.supervisor")
    assert backend_trespass("backends.kubernetes.backend", "backends.slurm.client")
    assert backend_trespass("backends.agents.supervisor", "backends.local.launch")  # shared: no backend's
    assert backend_trespass("backends.warm.forked", "backends.agents.torchrun") is None  # shared on shared
    assert backend_trespass("backends.slurm.launch", "backends.agents.supervisor") is None
    assert backend_trespass("backends.local.backend", "backends.base") is None
    assert backend_trespass("backends", "backends.slurm.allocation") is None  # the registry
    # the rule sees what the sources import: Slurm's launcher builds on the shared supervisor
    seen = {target for _, target, ours in imports(PACKAGE / "backends" / "slurm" / "launch.py") if ours}
    assert "backends.agents.supervisor" in seen


# Import circles between modules that are allowed, each with its reason (docs/architecture.md):
# none is.
JUSTIFIED_CYCLES: dict[frozenset[str], str] = {}


def module_cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(frozenset(group))
    return found


def test_no_module_import_cycle() -> None:
    # Every import statement counts (at the top, inside functions, under TYPE_CHECKING): a circle
    # of modules is a circle of meaning, whatever Python tolerates at run time.
    graph = {module_name(p): {t for _, t, ours in imports(p) if ours} - {module_name(p)} for p in SOURCES}
    cycles = {cycle: sorted(cycle) for cycle in module_cycles(graph)}
    assert {c: v for c, v in cycles.items() if c not in JUSTIFIED_CYCLES} == {}
    assert set(JUSTIFIED_CYCLES) <= set(cycles)  # one that is gone leaves the list


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e", "d"}}
    assert module_cycles(graph) == [frozenset({"a", "b", "c"})]
    assert module_cycles({"x": {"y"}, "y": {"x"}, "z": {"y"}}) == [frozenset({"x", "y"})]
