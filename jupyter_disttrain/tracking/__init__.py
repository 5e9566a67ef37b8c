"""Experiment tracking read back: a job's runs, whichever made them.

``sources`` lists and details a job's runs through one strategy per source: ``em``'s run
directories (``runs``), MLflow's database (``mlflowdb``), and the job's own run of the
hyper-parameters captured at submit (``hparams``). ``mlflowtb`` follows MLflow into the job's
TensorBoard dir (a thread of the local launcher, or of rank 0's pod wrapper). Nothing here runs
inside the training processes: that is ``em``.
"""
