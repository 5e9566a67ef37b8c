"""The job layer: ``JobManager`` (list, describe, follow, submit, cancel, delete), a spec from
words, flags or JSON (``intake``), and each feature's job-level part: a failed job's story
(``failure``) and what a followed one raises (``errors``), how far a running job is
(``progress``), its checkpoints and resuming from one (``checkpoints``), warm start from the
front ends (``warmup``), the values a job sends back (``values``), a rank's debugger prompts
(``debug``), a running job's diagnosis (``diagnosis``) and the server's guard of the jobs no
launcher of ours watches (``guard``). The Python API (``api.py``) and every front end call it.
"""
