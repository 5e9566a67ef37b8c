"""The built-in launchers by name, and where each one's class is (the registry,
``launchers/__init__.py``, loads it on use).

Data only, importing nothing: the job model checks a spec's ``launcher`` and offers the
``--launcher`` choices by these names without the registry, which builds on the model.
"""

BUILTIN = {
    "torchrun": "jupyter_disttrain.launchers.torchrun:TorchrunLauncher",
    "deepspeed": "jupyter_disttrain.launchers.deepspeed:DeepSpeedLauncher",
    "mxnet": "jupyter_disttrain.launchers.mxnet:MXNetLauncher",
    "horovod": "jupyter_disttrain.launchers.horovod:HorovodLauncher",
}
NAMES = tuple(BUILTIN)
DEFAULT = "torchrun"
