"""The local backend: torchrun agents (or a launcher's processes) on this machine.

``backend`` is the ``Backend``; ``launch`` is the job's launcher process (``python -m
jupyter_disttrain.backends.local.launch JOB_DIR``), which starts the agents and then runs the
``supervisor``. The launcher imports this package on its critical path, so it imports nothing.
"""
