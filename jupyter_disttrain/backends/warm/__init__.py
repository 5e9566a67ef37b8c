"""Warm start, shared by the backends whose ranks fork from a zygote (the local backend; Slurm's
warm steps): a process that has imported torch forks a job's torchrun agent and its ranks.
Each module is imported by name (``launch`` paths import ``warmagent`` alone):

- ``plan``: which jobs run warm, where a zygote lives (a 0700 runtime dir), its fingerprint and
  environment key, starting and stopping one;
- ``zygote``: the process that holds torch imported and forks (started by name: process listings
  and ``plan.ZYGOTE_MODULE`` name it), with its wire protocol and fork-safety checks in
  ``zygote_protocol``;
- ``forked``: the only code that runs in forked processes, a torchrun agent and its ranks, with
  ``fresh``: what a fresh interpreter has that a fork must be given back;
- ``warmagent``: a launcher's side, the agent asked for (``spawn``) and driven like a ``Popen``.

It imports no backend's own package (``tests/test_layers.py``); ``agents`` it builds on.
"""
