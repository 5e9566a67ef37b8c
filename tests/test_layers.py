"""The package's layers (docs/architecture.md), checked on every import statement, lazy ones too.

The core and the backends know nothing of Jupyter (no tornado, jupyter_server, IPython,
ipywidgets or ipykernel); the code that runs inside training processes imports only its own
kind; front ends build on the job layer and never import one another.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "jupyter_disttrain"
JUPYTER = ("tornado", "jupyter_server", "jupyter_server_proxy", "IPython", "ipywidgets", "ipykernel")

# Layer of each module (dotted, under the package); the first prefix that matches wins.
LAYERS = [
    ("runtime", "runtime"),
    ("em", "em"),
    ("backends", "backends"),
    ("front:server", "server"),
    ("front:magic", "magics"),
    ("front:magic", "widgets"),
    ("front:cli", "cli"),
    ("commands", "commands"),
    ("job layer", "api"),
    ("job layer", "manager"),
    ("entry points", "__init__"),
    ("core", ""),
]
# What each layer may import from the package.
ALLOWED = {
    "runtime": {"runtime"},
    # Experiment tracking runs inside the training processes like the runtime, but it is the
    # user's API, not the launcher's: its own layer, on the runtime's names only, so a script
    # importing it pulls in none of the job machinery (and no Jupyter).
    "em": {"em", "runtime"},
    "core": {"core", "runtime"},
    "backends": {"core", "runtime", "backends"},
    "job layer": {"core", "backends", "job layer"},
    "commands": {"core", "job layer", "commands"},
    "front:magic": {"core", "backends", "job layer", "commands", "front:magic"},
    "front:cli": {"core", "commands", "front:cli"},
    "front:server": {"core", "backends", "job layer", "front:server"},
    "entry points": {"core", "job layer", "front:magic", "front:server"},
}
NO_JUPYTER = {"runtime", "em", "core", "backends", "job layer", "commands", "front:cli"}


# Modules whose layer is not their prefix's: the intake reads the backend registry (each
# backend's options), so it sits above the backends, with the job layer.
EXACT = {"intake": "job layer"}


def layer_of(module: str) -> str:
    if module in EXACT:
        return EXACT[module]
    for layer, prefix in LAYERS:
        if module == prefix or module.startswith(prefix + ".") or prefix == "":
            return layer
    raise AssertionError(module)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


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
                found.append((node.lineno, alias.name.removeprefix("jupyter_disttrain").lstrip("."), ours))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, *(node.module or "").split(".")]).strip(".")
                if node.module:
                    names = [target]
                else:  # from . import api: each name is a module
                    names = [".".join([*base, a.name]).strip(".") for a in node.names]
                found += [(node.lineno, name, True) for name in names]
            elif (node.module or "").startswith("jupyter_disttrain"):
                target = (node.module or "").removeprefix("jupyter_disttrain").lstrip(".")
                found.append((node.lineno, target, True))
            else:
                found.append((node.lineno, node.module or "", False))
    return found


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer_and_the_table_is_whole() -> None:
    assert {layer_of(module_name(p)) for p in SOURCES} == set(ALLOWED)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_follow_the_layers(path: Path) -> None:
    layer = layer_of(module_name(path))
    wrong = []
    for line, target, ours in imports(path):
        if ours:
            if target and layer_of(target) not in ALLOWED[layer]:
                wrong.append(f"line {line}: {layer} imports {target} ({layer_of(target)})")
        elif layer in NO_JUPYTER and target.split(".")[0] in JUPYTER:
            wrong.append(f"line {line}: {layer} imports {target}")
    assert wrong == []


def test_the_checker_sees_relative_and_lazy_imports(tmp_path: Path) -> None:
    # A checker that saw nothing would pass everything: it must resolve what the modules import.
    seen = {target for _, target, ours in imports(PACKAGE / "magics.py") if ours}
    assert {"api", "commands", "widgets", "specs"} <= seen  # some of them inside functions
    seen = {target for _, target, ours in imports(PACKAGE / "backends" / "local" / "supervisor.py") if ours}
    assert {"procs", "runtime.joined", "backends.local.diagnosis", "launchers"} <= seen  # launchers: lazy
    assert layer_of("server.handlers") == "front:server" and layer_of("specs") == "core"
