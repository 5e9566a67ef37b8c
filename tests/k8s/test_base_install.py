"""A base install (no ``kubernetes`` package) inside a pod with a service account: ``%%distrun``
stays on the local backend, and ``--backend kubernetes`` says in one line what to install.

Runs in a fresh interpreter whose import system cannot find ``kubernetes``, as after
``pip install jupyter_disttrain`` without the extra.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jupyter_disttrain

CHILD = """\
import json, sys


class NoKubernetes:
    # Not installed: the import system finds no such module.
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "kubernetes":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoKubernetes())

import jupyter_disttrain.backends as backends
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

# The pod's token lives at a fixed path a test cannot write: point at the one it made.
backends.SERVICE_ACCOUNT_DIR = sys.argv[1]
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "jupyter_disttrain")
out = {"default": backends.default_backend_name(), "in_pod": backends.in_pod_with_service_account()}
for key, line in (("bare", "--dry-run"), ("explicit", "--backend kubernetes --dry-run")):
    try:
        ip.run_cell_magic("distrun", line, "print('hello')")
        out[key] = "ok"
    except UsageError as exc:
        out[key] = str(exc)
print("RESULT " + json.dumps(out))
"""


def test_base_install_in_a_pod_stays_local(tmp_path: Path) -> None:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("a-token")
    (account / "namespace").write_text("team-a")
    env = {
        **os.environ,
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "DISTTRAIN_JOB_ROOT": str(tmp_path / "jobs"),
        # This checkout's code, as the test process imports it (the child runs elsewhere).
        "PYTHONPATH": str(Path(jupyter_disttrain.__file__).parents[1]),
    }
    env.pop("DISTTRAIN_BACKEND", None)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(account)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [ln for ln in child.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, child.stdout + child.stderr
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["in_pod"] is True and out["default"] == "local"
    assert out["bare"] == "ok"  # the dry run of a bare %%distrun went to the local backend
    assert "launch request (local backend)" in child.stdout
    assert out["explicit"] == (
        "%%distrun: the Kubernetes backend needs the kubernetes client: "
        "pip install 'jupyter_disttrain[kubernetes]'"
    )
    assert "Traceback" not in child.stderr
