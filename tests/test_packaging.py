"""package_cell against a real IPython shell: real `In` history, real namespace, scripts really run."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain.model.errors import PackagingError
from jupyter_disttrain.packaging import PackagedScript, package_cell
from jupyter_disttrain.packaging.origins import ORIGINS_FILE
from jupyter_disttrain.packaging.scopes import analyze


def run(ip: InteractiveShell, *cells: str) -> None:
    for cell in cells:
        result = ip.run_cell(cell, store_history=True)
        result.raise_error()


def package(ip: InteractiveShell, cell: str, **options: Any) -> PackagedScript:
    return package_cell(cell, list(ip.user_ns["In"][1:]), ip.user_ns, **options)


def run_script(packaged: PackagedScript, folder: Path, *extra: str) -> str:
    """Write the script and its side files to ``folder``, run it, return stdout (fails on error)."""
    script = folder / "train.py"
    script.write_text(packaged.source)
    for name, data in packaged.files.items():
        (folder / name).write_bytes(data)
    other = folder / "elsewhere"
    other.mkdir(exist_ok=True)
    # Run from another directory: the script must find its side files next to itself.
    done = subprocess.run(
        [*extra, str(script)] if extra else [sys.executable, str(script)],
        cwd=other,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, f"script failed:\n{done.stderr}\n--- script ---\n{packaged.source}"
    return done.stdout


# --- what is captured ----------------------------------------------------------------------------


def test_function_and_class_are_copied_from_their_cells_with_comments(shell: InteractiveShell) -> None:
    run(
        shell,
        "def scale(x, factor=2):\n    # doubles by default\n    return x * factor",
        "class Counter:\n    start = 10\n\n    def bump(self, n):\n        return scale(n) + self.start",
    )
    packaged = package(shell, "print(Counter().bump(1))")
    assert packaged.captured == ["scale", "Counter"]
    assert "    # doubles by default\n" in packaged.source
    assert "# In [2]\nclass Counter:\n    start = 10\n\n    def bump" in packaged.source


def test_hparams_dict_is_sent_as_a_readable_literal(shell: InteractiveShell) -> None:
    run(shell, "hparams = dict(lr=1e-3, layers=[64, 64], name='mlp', tags={'a', 'b'}, inf=float('inf'))")
    packaged = package(shell, "print(hparams['lr'])")
    line = next(line for line in packaged.source.splitlines() if line.startswith("hparams = "))
    assert line == (
        "hparams = {'lr': 0.001, 'layers': [64, 64], 'name': 'mlp', 'tags': {'a', 'b'}, "
        "'inf': float(\"inf\")}  # In [1]"
    )


def test_import_aliases_are_reproduced_as_written(shell: InteractiveShell) -> None:
    run(
        shell,
        "import numpy as np\nfrom os import path as P, sep\nimport xml.etree.ElementTree as ET\nimport json",
    )
    packaged = package(shell, "print(np.pi, P.join('a', 'b'), ET.Element('x').tag, sep)")
    imports = [line.split("  #")[0] for line in packaged.source.splitlines() if "  # In [1]" in line]
    assert imports == [
        "import numpy as np",
        "from os import path as P",
        "from os import sep",
        "import xml.etree.ElementTree as ET",
    ]  # json is not used, so not imported


def test_latest_definition_wins(shell: InteractiveShell) -> None:
    run(shell, "def f():\n    return 'old'", "x = 1", "def f():\n    return 'new'", "x = 2")
    packaged = package(shell, "print(f(), x)")
    assert "'new'" in packaged.source and "'old'" not in packaged.source
    assert "x = 2  # In [4]" in packaged.source


def test_helpers_and_imports_used_only_inside_functions_are_captured(shell: InteractiveShell) -> None:
    run(
        shell,
        "import math\nimport statistics as st\nimport random",
        "def _norm(v):\n    return math.sqrt(sum(x * x for x in v))",
        "def summary(v):\n    return st.mean(v), _norm(v)",
        "LIMIT = 3",
        "def clipped(v, limit=LIMIT):\n    return [min(x, limit) for x in v]",
    )
    packaged = package(shell, "print(summary(clipped([3, 4, 5])))")
    assert set(packaged.captured) == {"math", "st", "LIMIT", "_norm", "summary", "clipped"}
    assert "random" not in packaged.source


def test_scoping_rules_decide_what_is_free(shell: InteractiveShell) -> None:
    # Every name below is defined in the history as something that cannot be sent; packaging only
    # succeeds if none of them is (wrongly) taken as a name the cell needs.
    run(
        shell,
        "import threading\nlock = threading.Lock()\n"
        "i = k = a = y = total = item = threading.Lock()\nvalues = [1, 2]",
    )
    cell = (
        "squares = [i * i for i in values]\n"
        "lookup = {k: v for k, v in zip('ab', values)}\n"
        "def f(a, *, y=1):\n    global total\n    total = a + y\n    return total\n"
        "f(1)\n"
        "item = 5\n"
        "del item\n"
        "print(squares, lookup, len(values), values.count, total)\n"
    )
    packaged = package(shell, cell)
    assert packaged.captured == ["values"]


def test_a_name_read_before_the_cell_assigns_it_is_captured(shell: InteractiveShell) -> None:
    run(shell, "step = 1\nfor_later = 2")
    packaged = package(shell, "step = step + 1\nfor_later = 0\nprint(step, for_later)")
    assert packaged.captured == ["step"]


def test_functions_the_cell_feeds_are_not_given_history_values(shell: InteractiveShell) -> None:
    # `train` reads the global `model`; the cell binds `model` itself, so the history's (unsendable)
    # model must not be captured.
    run(shell, "import threading\nmodel = threading.Lock()", "def train():\n    return model * 2")
    packaged = package(shell, "model = 21\nprint(train())")
    assert packaged.captured == ["train"]


# --- the script runs ----------------------------------------------------------------------------


def test_packaged_script_runs_standalone(shell: InteractiveShell, tmp_path: Path) -> None:
    run(
        shell,
        "import json\nfrom collections import Counter as C",
        "config = {'words': ['a', 'b', 'a'], 'sep': '-', 'raw': b'\\x00', 'buf': bytearray(b'z')}",
        "def count(ws):\n    return C(ws).most_common(1)[0]",
        "class Report:\n    def __init__(self, top):\n        self.top = top\n"
        "    def text(self):\n        return json.dumps(self.top)",
    )
    cell = (
        "top = count(config['words'])\nprint(Report(top).text(), config['sep'], config['raw'], config['buf'])"
    )
    out = run_script(package(shell, cell), tmp_path)
    assert out == "[\"a\", 2] - b'\\x00' bytearray(b'z')\n"


def test_script_with_tensors_and_arrays_runs(shell: InteractiveShell, tmp_path: Path) -> None:
    run(
        shell,
        "import torch, numpy as np",
        "w = torch.arange(6, dtype=torch.float64).reshape(2, 3)\n"
        "b = torch.tensor([1.0, float('nan')], requires_grad=True)\n"
        "big = torch.linspace(0, 1, 1000)\n"
        "param = torch.nn.Parameter(torch.ones(2, 2))\n"
        "arr = np.array([1, 2, 3], dtype=np.int16)\n"
        "big_arr = np.arange(500, dtype=np.float32)\n"
        "stats = {'mean': torch.zeros(100), 'n': np.int64(7), 'dev': torch.device('cpu'), "
        "'dtype': torch.bfloat16}",
    )
    cell = (
        "print(w.dtype, w.sum().item(), b.requires_grad, torch.isnan(b).sum().item())\n"
        "print(float(big.sum()), type(param).__name__, param.requires_grad)\n"
        "print(arr.dtype, arr.tolist(), big_arr.dtype, float(big_arr.sum()))\n"
        "print(stats['mean'].shape, stats['n'] + 1, stats['dev'], stats['dtype'])\n"
    )
    packaged = package(shell, cell)
    assert "w = torch.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], dtype=torch.float64)" in packaged.source
    assert "arr = np.array([1, 2, 3], dtype='int16')" in packaged.source
    assert sorted(packaged.files) == ["captured_arrays.npz", "captured_values.pt", ORIGINS_FILE]
    out = run_script(packaged, tmp_path).splitlines()
    assert out == [
        "torch.float64 15.0 True 1",
        f"{float(shell.user_ns['big'].sum())} Parameter True",
        "int16 [1, 2, 3] float32 124750.0",
        "torch.Size([100]) 8 cpu torch.bfloat16",
    ]


def test_cell_statements_are_guarded_for_spawned_dataloader_workers(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    run(shell, "import torch\nfrom torch.utils.data import DataLoader, Dataset")
    cell = (
        "from torch.utils.data import TensorDataset\n"
        "SIZE = 6\n"
        "class Squares(Dataset):\n"
        "    def __len__(self):\n        return SIZE\n"
        "    def __getitem__(self, i):\n        return torch.tensor(i * i)\n"
        "note = str('''first\n  indented inside a string\n''')\n"
        "loader = DataLoader(Squares(), batch_size=3, num_workers=2, multiprocessing_context='spawn')\n"
        "print(sorted(int(x) for batch in loader for x in batch), repr(note))\n"
    )
    packaged = package(shell, cell)
    body = packaged.source.split("# --- The %%distrun cell ---\n")[1]
    assert body.startswith("from torch.utils.data import TensorDataset\nSIZE = 6\nclass Squares(Dataset):")
    guarded = "if __name__ == \"__main__\":\n    note = str('''first\n  indented inside a string\n''')\n"
    assert "\n" + guarded in body
    out = run_script(packaged, tmp_path)
    assert out == "[0, 1, 4, 9, 16, 25] 'first\\n  indented inside a string\\n'\n"


def test_script_runs_under_torchrun_with_two_ranks(shell: InteractiveShell, tmp_path: Path) -> None:
    run(
        shell,
        "import torch\nimport torch.distributed as dist",
        "def reduce_sum(t):\n    dist.all_reduce(t)\n    return t",
    )
    cell = (
        "dist.init_process_group('gloo')\n"
        "total = reduce_sum(torch.tensor([dist.get_rank() + 1.0]))\n"
        "print(f'rank {dist.get_rank()} total {total.item()}')\n"
        "dist.destroy_process_group()\n"
    )
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    out = run_script(package(shell, cell), tmp_path, *torchrun)
    # Both ranks share one stdout pipe, so their lines may interleave mid-line.
    assert sorted(re.findall(r"rank \d total [\d.]+", out)) == ["rank 0 total 3.0", "rank 1 total 3.0"]


def test_base_class_redefined_later_is_placed_first(shell: InteractiveShell, tmp_path: Path) -> None:
    run(
        shell,
        "class Base:\n    name = 'old'",
        "class Child(Base):\n    pass",
        "class Base:\n    name = 'new'",
    )
    packaged = package(shell, "print(Child.name)")
    assert packaged.captured == ["Base", "Child"]
    assert run_script(packaged, tmp_path) == "new\n"


def test_references_to_library_objects_and_aliases(shell: InteractiveShell, tmp_path: Path) -> None:
    run(
        shell,
        "import importlib, json\nenc = importlib.import_module('json')\ndumps = json.dumps",
        "def shout(s):\n    return s.upper()",
        "yell = shout",
        "import numpy\nroot = numpy.sqrt",
    )
    packaged = package(shell, "print(enc.loads('[1]'), dumps({'a': 1}), yell('hi'), root(9.0))")
    assert "import json as enc" in packaged.source
    assert "from json import dumps  # (from the kernel namespace)" not in packaged.source
    assert "from json import dumps" in packaged.source
    assert "yell = shout" in packaged.source
    assert "from numpy import sqrt as root" in packaged.source
    assert run_script(packaged, tmp_path) == '[1] {"a": 1} HI 3.0\n'


def test_definitions_inside_if_blocks_and_lambda_assignments(shell: InteractiveShell, tmp_path: Path) -> None:
    run(
        shell,
        "import sys\nif sys.version_info >= (3, 8):\n    def pick(x):\n        return x[0]\n"
        "else:\n    def pick(x):\n        return None",
        "twice = lambda v: v * 2",
    )
    packaged = package(shell, "print(pick([twice(4)]))")
    assert "def pick(x):\n    return x[0]" in packaged.source
    assert run_script(packaged, tmp_path) == "8\n"


def test_library_names_avoid_the_users_names(shell: InteractiveShell, tmp_path: Path) -> None:
    run(shell, "import numpy\nnp = 'not numpy'\nvec = numpy.arange(3)")
    packaged = package(shell, "print(vec.tolist(), np)")
    assert "import numpy as _np" in packaged.source
    assert run_script(packaged, tmp_path) == "[0, 1, 2] not numpy\n"


def test_header_goes_into_the_docstring(shell: InteractiveShell) -> None:
    packaged = package(shell, "print(1)", header='From notebook "a.ipynb" with \\ and """ inside')
    assert packaged.source.startswith('"""Training script packaged by jupyter_disttrain')
    compile(packaged.source, "train.py", "exec")
    namespace: dict[str, Any] = {}
    exec(compile(packaged.source.split("\n\n# ---")[0], "doc", "exec"), namespace)
    assert namespace["__doc__"].rstrip().endswith('From notebook "a.ipynb" with \\ and """ inside')
    # How to run it by hand: run.sh (the job's flags, its working dir and PYTHONPATH), not a bare
    # torchrun that cannot import the notebook's own modules.
    assert "bash run.sh" in namespace["__doc__"] and "PYTHONPATH" in namespace["__doc__"]
    assert "torchrun --nproc-per-node" not in namespace["__doc__"]


# --- what is refused ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (
            "v = open(__file__)",
            "cannot send `v` (an open file, defined in In [2]) to the job: open it inside",
        ),
        ("v = socket.socket()", "cannot send `v` (a socket, defined in In [2]) to the job: create it inside"),
        ("v = threading.Thread(target=print)", "cannot send `v` (a thread, defined in In [2])"),
        ("v = threading.RLock()", "cannot send `v` (a lock, defined in In [2])"),
        ("v = (i for i in range(3))", "cannot send `v` (a generator, defined in In [2])"),
        (
            "v = {'cfg': {'log': open(__file__)}}",
            "cannot send `v` (defined in In [2]) to the job: `v['cfg']['log']` is an open file; open it",
        ),
        ("v = list(range(100))", "cannot send `v` (over 256 B of data, defined in In [2])"),
    ],
)
def test_unsendable_values_are_refused_with_name_and_cell(
    shell: InteractiveShell, setup: str, message: str
) -> None:
    run(shell, "import socket, threading", setup.replace("__file__", repr(__file__)))
    try:
        with pytest.raises(PackagingError) as error:
            package(shell, "print(v)", max_value_bytes=256)
        assert str(error.value).startswith(message), str(error.value)
        assert "\n" not in str(error.value)
    finally:
        value = shell.user_ns.get("v")
        for closable in (value, *(value.get("cfg", {}).values() if isinstance(value, dict) else ())):
            if hasattr(closable, "close"):
                closable.close()


def test_tensors_off_the_cpu_are_refused(shell: InteractiveShell) -> None:
    # No GPU here: a tensor on the meta device takes the same "not on the CPU" path as a CUDA one.
    run(shell, "import torch\nv = torch.empty(3, device='meta')")
    with pytest.raises(PackagingError, match=r"^cannot send `v` \(a tensor on meta, defined in In \[1\]\)"):
        package(shell, "print(v)")


def test_oversized_tensor_is_refused(shell: InteractiveShell) -> None:
    run(shell, "import torch\nweights = torch.zeros(1024)")
    with pytest.raises(
        PackagingError, match=r"cannot send `weights` \(4.0 KiB of data, defined in In \[1\]\)"
    ):
        package(shell, "print(weights)", max_value_bytes=1000)


def test_names_injected_outside_cells_say_so(shell: InteractiveShell) -> None:
    shell.user_ns["injected"] = threading.Event()
    shell.user_ns["plain"] = [1, 2]
    with pytest.raises(PackagingError, match=r"cannot send `injected` \(a lock, not defined in any cell\)"):
        package(shell, "print(injected)")
    assert "plain = [1, 2]\n" in package(shell, "print(plain)").source


def test_unsendable_dependency_names_the_function_that_needs_it(shell: InteractiveShell) -> None:
    run(shell, f"log = open({__file__!r})", "def note(s):\n    log.write(s)")
    try:
        with pytest.raises(
            PackagingError, match=r"an open file, defined in In \[1\], used by `note` \(In \[2\]\)"
        ):
            package(shell, "note('x')")
    finally:
        shell.user_ns["log"].close()


def test_functions_using_ipython_are_refused(shell: InteractiveShell) -> None:
    run(shell, "def listing():\n    return get_ipython().getoutput('ls')")
    with pytest.raises(
        PackagingError, match=r"cannot send `listing` \(defined in In \[1\]\) .* `get_ipython`"
    ):
        package(shell, "print(listing())")
    with pytest.raises(PackagingError, match=r"^line 2 of the cell uses `get_ipython`"):
        package(shell, "x = 1\nget_ipython()")


# --- bad cells ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ("", "the cell is empty: write the training code under %%distrun"),
        ("  \n# only a comment\n", "the cell is empty"),
        ("x = 1\nfor i in\n    pass\n", "line 2 of the cell: invalid syntax in `for i in`"),
        ("x = (1,\n", "line 1 of the cell:"),
        ("a = 1\n%pip install foo\n", "line 2 of the cell: invalid syntax in `%pip install foo`; magics"),
        ("a = 1\nb = 2\nreturn a\n", "line 3 of the cell: 'return' outside function"),
    ],
)
def test_bad_cells_name_the_cell_line(shell: InteractiveShell, cell: str, message: str) -> None:
    with pytest.raises(PackagingError) as error:
        package(shell, cell)
    assert str(error.value).startswith(message), str(error.value)
    assert "\n" not in str(error.value)


# --- history with magics and shell escapes -------------------------------------------------------


def test_magics_and_shell_escapes_in_history(shell: InteractiveShell, tmp_path: Path) -> None:
    # %%distrun is not registered in a bare shell; its transformed form is added to the history by hand.
    run(
        shell,
        "%time base = 40",
        "!true",
        "files = !echo one two",
        "%%time\ndef add(x):\n    return x + base",
        "%%capture captured\nprint('hidden')\nextra = 2",
    )
    history = [
        *shell.user_ns["In"][1:],
        "get_ipython().run_cell_magic('distrun', '', 'print(1)\\n')",
        "def (",
    ]
    packaged = package_cell("print(add(extra), files)", history, shell.user_ns)
    assert packaged.captured == ["base", "files", "extra", "add"]
    assert "files = ['one two']  # In [3]" in packaged.source
    assert run_script(packaged, tmp_path) == "42 ['one two']\n"


def test_undefined_names_are_refused_or_reported(shell: InteractiveShell) -> None:
    with pytest.raises(PackagingError, match=r"line 2 of the cell uses `nowhere`"):
        package(shell, "x = 1\nprint(nowhere)\n")
    # Only in a function the cell never calls: it may never run, so a warning, not a refusal.
    packaged = package(shell, "def later():\n    print(nowhere)\n")
    assert [(p.code, p.line) for p in packaged.pitfalls] == [("undefined-name", 2)]
    assert package(shell, "print(nowhere)", ignore={"undefined-name"}).pitfalls == []
    assert package(shell, "print(nowhere)  # distrun: ignore[undefined-name]").pitfalls == []


def test_pitfalls_are_reported_and_filtered(shell: InteractiveShell) -> None:
    cell = "import torch\nm = torch.nn.DataParallel(torch.nn.Linear(1, 1))\n"
    assert [p.code for p in package(shell, cell).pitfalls] == ["data-parallel"]
    assert package(shell, cell, ignore=["data-parallel"]).pitfalls == []


def test_no_torch_or_numpy_import_for_plain_values(shell: InteractiveShell) -> None:
    run(shell, "n = 3")
    source = package(shell, "print(n)").source
    assert "import torch" not in source and "import numpy" not in source


# --- details of the script layout ----------------------------------------------------------------


def test_lazy_annotations_are_not_taken_as_needed_names(shell: InteractiveShell) -> None:
    cell = (
        "from __future__ import annotations\ndef f(x: Tensor) -> Model:\n    y: Other = x\n    return y\nf(1)"
    )
    packaged = package(shell, cell)
    assert packaged.pitfalls == [] and packaged.captured == []
    assert packaged.source.split('"""\n\n', 1)[1].startswith("from __future__ import annotations\n")
    compile(packaged.source, "train.py", "exec")


def test_annotations_that_run_are_needed(shell: InteractiveShell) -> None:
    run(shell, "Vector = list")
    assert package(shell, "def norm(v: Vector) -> float:\n    return 0.0").captured == ["Vector"]


def test_constants_stay_at_module_level_only_when_definitions_read_them(shell: InteractiveShell) -> None:
    cell = "SCALE = 3\ncount = 0\ndef scaled(x):\n    return x * SCALE\nprint(scaled(2), count)\n"
    body = package(shell, cell).source.split("# --- The %%distrun cell ---\n")[1]
    assert body == (
        "SCALE = 3\n"
        'if __name__ == "__main__":\n    count = 0\n'
        "def scaled(x):\n    return x * SCALE\n"
        'if __name__ == "__main__":\n    print(scaled(2), count)\n'
    )


def test_definitions_that_need_computed_values_stay_guarded(shell: InteractiveShell, tmp_path: Path) -> None:
    cell = "Base = type('Base', (), {'v': 7})\nclass Child(Base):\n    pass\nprint(Child.v)\n"
    packaged = package(shell, cell)
    assert "\n    class Child(Base):\n        pass\n" in packaged.source
    assert run_script(packaged, tmp_path) == "7\n"


def test_star_imports_and_ipython_display(shell: InteractiveShell) -> None:
    run(shell, "from math import *")
    source = package(shell, "display(sqrt(4.0), pi)").source
    assert "from math import sqrt  # (" not in source
    assert "from math import sqrt\n" in source and "pi = 3.141592653589793\n" in source
    assert "from IPython.display import display\n" in source


def test_ignore_star_silences_every_warning(shell: InteractiveShell) -> None:
    cell = "def later():\n    m = nn.DataParallel(net)\n    print(nowhere)"
    assert [p.code for p in package(shell, cell).pitfalls] == ["data-parallel", *["undefined-name"] * 3]
    assert package(shell, cell, ignore={"*"}).pitfalls == []


def test_long_dependency_chains_do_not_hit_the_recursion_limit() -> None:
    depth = sys.getrecursionlimit() + 200
    history = ["def f0(x):\n    return x"]
    history += [f"def f{i}(x):\n    return f{i - 1}(x) + 1" for i in range(1, depth)]
    packaged = package_cell(f"print(f{depth - 1}(0))", history, {})
    assert packaged.captured == [f"f{i}" for i in range(depth)]


def test_dataclasses_enums_and_namespaces_are_rebuilt(shell: InteractiveShell, tmp_path: Path) -> None:
    run(
        shell,
        "import argparse, enum, types\nfrom dataclasses import dataclass, field",
        "class Mode(enum.Enum):\n    TRAIN = 1\n    EVAL = 2",
        "@dataclass\nclass Config:\n    lr: float = 0.1\n    layers: list = field(default_factory=list)\n"
        "    mode: Mode = Mode.TRAIN",
        "cfg = Config(lr=0.5, layers=[1, 2], mode=Mode.EVAL)\n"
        "args = argparse.Namespace(epochs=3)\nns = types.SimpleNamespace(a='x')",
    )
    packaged = package(shell, "print(cfg, args, ns)")
    assert "# In [4]\ncfg = Config(lr=0.5, layers=[1, 2], mode=Mode.EVAL)\n" in packaged.source
    assert packaged.source.index("class Config:") < packaged.source.index("cfg = Config(")
    expected = "Config(lr=0.5, layers=[1, 2], mode=<Mode.EVAL: 2>) Namespace(epochs=3) namespace(a='x')\n"
    assert run_script(packaged, tmp_path) == expected


@pytest.mark.parametrize(
    ("source", "free"),
    [
        ("ys = [last := x for x in xs]\nprint(last)", {"xs"}),
        (
            "match cmd:\n    case {'a': va, **rest}:\n        print(va, rest)\n    case Point(x=px) as pt:\n"
            "        print(px, pt)",
            {"cmd", "Point"},
        ),
        ("try:\n    pass\nexcept ValueError as err:\n    print(err)", set()),
        ("with open(f) as fh, ctx() as (a, b):\n    print(fh, a, b)", {"f", "ctx"}),
        ("class A:\n    x = 1\n    y = [x for _ in range(3)]", {"x"}),  # class scope is not visible there
        (
            "def g():\n    v = 1\n    def h():\n        nonlocal v\n        return v + outer\n    return h",
            {"outer"},
        ),
        ("import a.b.c\nprint(a)", set()),
        ("x: int\nprint(x)", {"x"}),
        ("f = lambda q=default: q + free_in_lambda", {"default", "free_in_lambda"}),
        ("async def co():\n    async for i in src():\n        await thing(i)", {"src", "thing"}),
        ("n += 1\nobj.attr = val\ndel gone", {"n", "obj", "val", "gone"}),
        ("print(__name__, __file__, len, display)", {"display"}),
    ],
)
def test_free_names_follow_python_scoping(source: str, free: set[str]) -> None:
    assert set(analyze(source).free) == free
