"""The job model: what a job is and how it goes (``specs``), its errors, its flags declared as
typed fields, what a status says of a failure (``failure``) and of progress (``progress``), a
rank's traceback and stack dump read as text (``tracebacks``), and how a poller backs off.
Pure: no I/O, nothing of Jupyter; every other layer builds on it.
"""
