"""The Jupyter server extension: REST API over the job store, live logs, TensorBoard proxy.

``app.DistTrainApp`` is the extension; ``routes.ROUTES`` is its one route table. The modules
here are thin adapters: ``jobs.JobService`` does the work with the backends and knows nothing
of tornado, so it can be used and tested without a server.
"""
