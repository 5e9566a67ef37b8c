"""The libraries resume and save where the job says, without a change to the script (README
"Checkpoints", "What the libraries get").

Applied by the rank wrapper only when the environment asks, each right after the script imports
the module (``importhook.after_import``: nothing is imported that the script does not import):

- with ``DISTTRAIN_RESUME_FROM`` set to a Lightning ``.ckpt``: ``Trainer.fit(...)`` without a
  ``ckpt_path`` (or with ``None``) gets it;
- with it set to a DeepSpeed tag directory: ``engine.load_checkpoint(load_dir)`` without a
  ``tag``, where ``load_dir`` is the job's checkpoint dir or the resume path itself, loads that
  tag from its save dir;
- with it set to a DCP directory (``.metadata`` in it): ``torch.distributed.checkpoint.load(state)``
  without a ``checkpoint_id`` or ``storage_reader`` gets it;
- with ``DISTTRAIN_CHECKPOINT_DIR`` set (every job): Lightning's ``ModelCheckpoint`` without a
  ``dirpath`` (the Trainer's default one too) saves there when the Trainer has no
  ``default_root_dir`` of the user's either, so the job lists what it saves; so does a Hugging
  Face ``Trainer`` whose ``TrainingArguments`` has no ``output_dir`` of the user's (its
  ``checkpoint-N`` dirs land in the job's checkpoint dir, not in ``./trainer_output``).

Standard library only; the libraries' objects are reached through the modules given.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

from . import contract
from .importhook import after_import

LIGHTNING = ("lightning.pytorch", "pytorch_lightning")
DEEPSPEED_ENGINE = "deepspeed.runtime.engine"
DCP_LOADER = "torch.distributed.checkpoint.state_dict_loader"
DCP_PACKAGE = "torch.distributed.checkpoint"
HF_TRAINING_ARGS = "transformers.training_args"


def install() -> None:
    """Wait for the modules this job's environment asks to adapt (see the module's doc)."""
    resume = os.environ.get(contract.RESUME_FROM_ENV)
    checkpoint_dir = os.environ.get(contract.CHECKPOINT_DIR_ENV)
    if checkpoint_dir:
        for package in LIGHTNING:
            after_import(f"{package}.callbacks.model_checkpoint", _default_dirpath(checkpoint_dir))
        after_import(HF_TRAINING_ARGS, _default_output_dir(checkpoint_dir))
    if not resume:
        return
    if resume.endswith(".ckpt"):
        for package in LIGHTNING:
            after_import(f"{package}.trainer.trainer", _fit_from(resume))
    elif os.path.isfile(os.path.join(resume, ".metadata")):
        after_import(DCP_LOADER, _dcp_from(resume))
    elif os.path.isdir(resume):
        after_import(DEEPSPEED_ENGINE, _deepspeed_from(resume, checkpoint_dir))


def _default_dirpath(checkpoint_dir: str) -> Any:
    def patch(module: Any) -> None:
        cls = module.ModelCheckpoint
        resolve = cls._ModelCheckpoint__resolve_ckpt_dir  # where a ModelCheckpoint without dirpath saves

        @functools.wraps(resolve)
        def resolve_ckpt_dir(self: Any, trainer: Any) -> Any:
            # The job's root is Lightning's default here (backends/rankenv.py): the user chose neither.
            default_root = os.environ.get(contract.LIGHTNING_ROOT_ENV)
            if self.dirpath is None and default_root and _same(trainer.default_root_dir, default_root):
                return checkpoint_dir
            return resolve(self, trainer)

        cls._ModelCheckpoint__resolve_ckpt_dir = resolve_ckpt_dir

    return patch


def _default_output_dir(checkpoint_dir: str) -> Any:
    def output_dir(self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        # None: the user chose no output_dir (transformers would take ./trainer_output)
        if getattr(self, "output_dir", "") is None:
            self.output_dir = checkpoint_dir
        return args

    return lambda module: _adjust_calls(module.TrainingArguments, "__post_init__", output_dir)


def _same(a: Any, b: str) -> bool:
    return os.path.normpath(os.path.abspath(os.fspath(a))) == os.path.normpath(os.path.abspath(b))


def _fit_from(resume: str) -> Any:
    def ckpt_path(self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        # fit(model, train_dataloaders, val_dataloaders, datamodule, ckpt_path, ...)
        if len(args) < 5 and kwargs.get("ckpt_path") is None:
            kwargs["ckpt_path"] = resume
        elif len(args) >= 5 and args[4] is None:
            args = (*args[:4], resume, *args[5:])
        return args

    return lambda module: _adjust_calls(module.Trainer, "fit", ckpt_path)


Adjust = Callable[[Any, tuple[Any, ...], dict[str, Any]], tuple[Any, ...]]


def _adjust_calls(cls: Any, name: str, adjust: Adjust) -> None:
    """Make ``cls.name`` call the original with the arguments ``adjust(self, args, kwargs)``
    leaves (it returns the positional ones and may change the keywords, or ``self``)."""
    original = getattr(cls, name)

    @functools.wraps(original)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        args = adjust(self, args, kwargs)
        return original(self, *args, **kwargs)

    setattr(cls, name, method)


def _deepspeed_from(resume: str, checkpoint_dir: str | None) -> Any:
    save_dir, tag = os.path.split(os.path.normpath(resume))
    asked = {os.path.normpath(p) for p in (resume, checkpoint_dir) if p}

    def patch(module: Any) -> None:
        cls = module.DeepSpeedEngine
        load = cls.load_checkpoint

        @functools.wraps(load)
        def load_checkpoint(self: Any, load_dir: Any, *args: Any, **kwargs: Any) -> Any:
            chosen = args[0] if args else kwargs.get("tag")  # load_checkpoint(load_dir, tag=None, ...)
            if chosen is None and os.path.normpath(os.fspath(load_dir)) in asked:
                kwargs["tag"] = tag
                return load(self, save_dir, *args[1:], **kwargs)
            return load(self, load_dir, *args, **kwargs)

        cls.load_checkpoint = load_checkpoint

    return patch


def _dcp_from(resume: str) -> Any:
    def patch(module: Any) -> None:
        load = module.load

        @functools.wraps(load)
        def patched(*args: Any, **kwargs: Any) -> Any:
            if len(args) < 2 and kwargs.get("checkpoint_id") is None and kwargs.get("storage_reader") is None:
                kwargs["checkpoint_id"] = resume
            return load(*args, **kwargs)

        module.load = patched
        package: Any = sys.modules.get(DCP_PACKAGE)  # loaded already (a warm rank): its name too
        if package is not None and getattr(package, "load", None) is load:
            package.load = patched

    return patch
