"""The process agents that two backends share: a launcher of ours, started beside the kernel or
on a job's first node, starts the job's agents and supervises them until the job ends.

The local backend's agents are torchrun (or a role's processes) on this machine; Slurm's are
``srun`` steps, one per node, each running the same torchrun agent under the same rank wrapper.
Each module is imported by name (there is no re-export here: the launcher imports ``start``
and ``request`` alone on its critical path, and the options registry ``options`` alone):

- ``spawn``: the launcher started in a session of its own, from the kernel or the server;
- ``start``: the launcher's first step, the agents started cold from the request;
- ``request``: the launch request a launcher carries out (``LocalRequest``, Slurm's extends
  it), its agents' command lines (``AgentCommand``) and the started agent's shape
  (``AgentProcess``);
- ``torchrun``: torchrun's agent command line around the rank wrapper (``WORKER_MODULE``);
- ``supervisor``: its run loop, with ``records``, ``diagnosis``, ``exits``, ``sidethreads`` and
  the stall and idle guard (``guarding``);
- ``options``: what a supervisor is told (``SupervisorOptions``), which every backend whose
  jobs it supervises declares as flags.

No backend's own package is imported here: the local backend's warm start and Slurm's ``srun``
steps build on these modules, not the other way round (``tests/test_layers.py``).
"""
