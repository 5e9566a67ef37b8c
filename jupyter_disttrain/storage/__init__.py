"""Where jobs live: the job store (one directory per job), the roots a user has, the jobs'
log files, files opened without following a link, and the processes a job started.
"""
