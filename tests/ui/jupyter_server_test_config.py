"""JupyterLab for the browser tests: 127.0.0.1, port and token from run.sh, jupyter_disttrain on.

When the package is not installed (a development checkout), run.sh points
``DISTTRAIN_LABEXTENSIONS`` at a folder holding the built lab extension and puts the checkout
on PYTHONPATH, so the server, its kernels and the page all use this checkout.
"""

import os

from jupyterlab.galata import configure_jupyter_server

configure_jupyter_server(c)  # noqa: F821  (galata helper extension, temporary root_dir, app in window)

c.ServerApp.ip = "127.0.0.1"  # noqa: F821
c.ServerApp.port = int(os.environ["JLAB_PORT"])  # noqa: F821
c.ServerApp.port_retries = 0  # noqa: F821
c.IdentityProvider.token = os.environ["JLAB_TOKEN"]  # noqa: F821  (galata's default is "")
c.ServerApp.disable_check_xsrf = False  # noqa: F821
c.ServerApp.jpserver_extensions = {"jupyter_disttrain": True}  # noqa: F821
c.ServerApp.allow_root = True  # noqa: F821  (CI machines run as root)
c.DistTrainApp.default_backend = "local"  # noqa: F821
if os.environ.get("DISTTRAIN_LABEXTENSIONS"):
    # galata's helper extension is on this path too: add to it, do not replace it
    galata_path = c.LabServerApp.extra_labextensions_path  # noqa: F821  (a str, set by galata)
    paths = [galata_path] if isinstance(galata_path, str) else list(galata_path)
    c.LabServerApp.extra_labextensions_path = [*paths, os.environ["DISTTRAIN_LABEXTENSIONS"]]  # noqa: F821
c.JupyterNotebookApp.expose_app_in_browser = True  # noqa: F821  (window.jupyterapp in Notebook 7 too)
