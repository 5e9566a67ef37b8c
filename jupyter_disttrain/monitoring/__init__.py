"""Watching a running job from outside it: what its processes use and where they are.

``resources`` reads the samples the launcher's (or pod wrapper's) sampler wrote
(``runtime.sampler``) into each replica's series and tells which running replicas went quiet;
``stacks`` dumps a replica's Python stacks (py-spy, else the rank's faulthandler).
"""
