"""The DDP checks: saves and writers on every rank, a DDP model's state_dict, DataParallel, a
fixed rank or world size, GPUs asked for where there are none, the sampler's epoch.

Each yields its findings as ``(code, node, message)``; ``pitfalls/__init__.py`` runs them.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from .code import (
    Code,
    Finding,
    call_name,
    dotted_name,
    guarded,
    int_constants,
    int_value,
    is_constant,
    keyword_arg,
    rankish,
    words,
)

# --- sampler-set-epoch -------------------------------------------------------------------------


def _sampler_set_epoch(code: Code) -> Iterator[Finding]:
    shuffling = [
        c
        for c in code.calls
        if call_name(c) == "DistributedSampler" and not is_constant(keyword_arg(c, "shuffle"), bool, False)
    ]
    if not shuffling:
        return
    for loop in _epoch_loops(code.tree):
        # set_epoch in the loop, or in a function or method it calls (one level, as for saves)
        if not _has_set_epoch(loop) and not any(_has_set_epoch(fn) for fn in code.called(loop)):
            yield (
                "sampler-set-epoch",
                loop,
                "DistributedSampler shuffles the same way every epoch unless told the epoch: call"
                " `sampler.set_epoch(epoch)` at the start of each epoch",
            )


def _has_set_epoch(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and call_name(n) == "set_epoch" for n in ast.walk(node))


def _epoch_loops(tree: ast.AST) -> Iterator[ast.For | ast.AsyncFor]:
    """Outermost loops that look like epoch loops: ``for epoch in ...``, or a counted loop
    (``for _ in range(n)``) holding a loop. A loop over something else holding a loop (``for
    name, m in model.named_modules():``, over batches) is not one."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            target = dotted_name(node.target).lower()
            loops = (ast.For, ast.AsyncFor, ast.While)
            inner = any(isinstance(n, loops) for n in ast.walk(node) if n is not node)
            if "epoch" in target or (inner and _counted(node.iter)):
                yield node
                continue
        yield from _epoch_loops(node)


def _counted(iterable: ast.AST) -> bool:
    """``range(n)``, ``trange(n)``, ``itertools.count()``, or one of them in a progress bar."""
    if not isinstance(iterable, ast.Call):
        return False
    if call_name(iterable) in ("range", "trange", "count"):
        return True
    return any(_counted(arg) for arg in iterable.args[:1])


# --- unguarded-save ----------------------------------------------------------------------------


def _unguarded_save(code: Code) -> Iterator[Finding]:
    engines = _deepspeed_engines(code)
    for call in code.calls:
        what = "" if _is_collective_save(call, engines) else _save_kind(call)
        if what and not guarded(code, call, set()):
            yield (
                "unguarded-save",
                call,
                f"every rank runs `{what}` and writes the same file: save only on rank 0, e.g. under"
                " `if dist.get_rank() == 0:`",
            )


def _save_kind(call: ast.Call) -> str:
    dotted = dotted_name(call.func)
    name = call_name(call)
    if dotted == "torch.save":
        return "torch.save(...)"
    if name == "save_checkpoint" and "trainer" not in dotted.lower():
        # Lightning's trainer.save_checkpoint must be called on every rank; it saves once by itself.
        return f"{dotted or name}(...)"
    if name == "save_pretrained" and keyword_arg(call, "is_main_process") is None:
        return f"{dotted or name}(...)"
    return ""


# --- unguarded-writer -------------------------------------------------------------------------


def _unguarded_writer(code: Code) -> Iterator[Finding]:
    """A TensorBoard writer made on every rank: each rank writes its own event file into the same
    directory, which TensorBoard then shows as one run whose every point comes N times."""
    for call in code.calls:
        if call_name(call) != "SummaryWriter" or guarded(code, call, set()):
            continue
        where = [*call.args[:1], *(k.value for k in call.keywords if k.arg in ("log_dir", "logdir"))]
        if any(rankish(w) for w in where):  # a directory per rank: f"runs/rank{rank}"
            continue
        yield (
            "unguarded-writer",
            call,
            "every rank creates this SummaryWriter and writes into the same directory: create it only"
            " on rank 0 (`if dist.get_rank() == 0:`), or log with `em` (from jupyter_disttrain), which"
            " records on rank 0 by itself",
        )


# --- guarded-collective-save -------------------------------------------------------------------


def _deepspeed_engines(code: Code) -> set[str]:
    """Names bound to what ``deepspeed.initialize`` returns (the engine is its first element)."""
    names: set[str] = set()
    for node in ast.walk(code.tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if dotted_name(node.value.func) not in ("deepspeed.initialize", "initialize"):
                continue
            for target in node.targets:
                first = target.elts[0] if isinstance(target, ast.Tuple | ast.List) and target.elts else target
                if dotted_name(first):
                    names.add(dotted_name(first))
    return names


def _is_collective_save(call: ast.Call, engines: set[str]) -> bool:
    """A DeepSpeed engine's ``save_checkpoint``: every rank must call it (each writes its shard)."""
    if call_name(call) != "save_checkpoint" or not isinstance(call.func, ast.Attribute):
        return False
    owner = dotted_name(call.func.value)
    return owner in engines or (bool(engines) and "engine" in owner.lower())


def _guarded_collective_save(code: Code) -> Iterator[Finding]:
    engines = _deepspeed_engines(code)
    for call in code.calls:
        if _is_collective_save(call, engines) and guarded(code, call, set()):
            yield (
                "guarded-collective-save",
                call,
                f"DeepSpeed's `{dotted_name(call.func)}(...)` is collective: every rank must call it (each"
                " saves its part, rank 0 alone waits forever); call it on all ranks, without the rank"
                " condition",
            )


# --- ddp-state-dict ----------------------------------------------------------------------------


def _ddp_state_dict(code: Code) -> Iterator[Finding]:
    # Scope (a function, None for module level) -> names bound to a DDP-wrapped model -> from which line.
    wrapped: dict[ast.AST | None, dict[str, int]] = {}
    for node in ast.walk(code.tree):
        if isinstance(node, ast.Assign) and _is_ddp(node.value):
            for target in node.targets:
                if dotted_name(target):
                    wrapped.setdefault(code.scope(node), {}).setdefault(dotted_name(target), node.lineno)
    for _ in range(3):  # a wrapped model passed on to a function, and from there to another
        for call in code.calls:
            function = code.functions.get(call.func.id) if isinstance(call.func, ast.Name) else None
            if function is None:
                continue
            params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
            passed = [*zip(params, call.args, strict=False), *((k.arg, k.value) for k in call.keywords)]
            for param, value in passed:
                if param and _wrapped_at(code, wrapped, value, call):
                    wrapped.setdefault(function, {})[param] = 0
    for call in code.calls:
        if isinstance(call.func, ast.Attribute) and call.func.attr == "state_dict":
            owner = call.func.value
            if _wrapped_at(code, wrapped, owner, call):
                name = dotted_name(owner)
                yield (
                    "ddp-state-dict",
                    call,
                    f"`{name}` is wrapped in DistributedDataParallel, so its state_dict keys start with"
                    f" 'module.': save `{name}.module.state_dict()` so it loads into a plain model",
                )


def _is_ddp(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and call_name(node) in ("DistributedDataParallel", "DDP")


def _wrapped_at(
    code: Code, wrapped: dict[ast.AST | None, dict[str, int]], node: ast.AST, at: ast.AST
) -> bool:
    """Whether ``node`` (read where ``at`` is) is a DDP-wrapped model: wrapped earlier in the same
    function (or passed in wrapped), or a module-level name the function reads as a global."""
    if _is_ddp(node):
        return True
    name = dotted_name(node)
    scope = code.scope(at)
    line = wrapped.get(scope, {}).get(name)
    if line is not None:
        return getattr(at, "lineno", 0) >= line
    if scope is None or name not in wrapped.get(None, {}):
        return False
    return name.split(".")[0] not in _locals(scope)


def _locals(function: ast.AST) -> set[str]:
    """Names a function binds itself (so they are not the module's)."""
    args = getattr(function, "args", None)
    names = {a.arg for a in ast.walk(args) if isinstance(a, ast.arg)} if args is not None else set()
    declared = {n for node in ast.walk(function) if isinstance(node, ast.Global) for n in node.names}
    stored = {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return (names | stored) - declared


# --- data-parallel -----------------------------------------------------------------------------


def _data_parallel(code: Code) -> Iterator[Finding]:
    for call in code.calls:
        if call_name(call) == "DataParallel":
            yield (
                "data-parallel",
                call,
                "nn.DataParallel drives several GPUs from one process and does not combine with torchrun:"
                " use DistributedDataParallel(model, device_ids=[local_rank])",
            )


# --- hardcoded-rank ----------------------------------------------------------------------------


def _hardcoded_rank(code: Code) -> Iterator[Finding]:
    for call in code.calls:
        if call_name(call) != "init_process_group":
            continue
        # init_process_group(backend, init_method, timeout, world_size, rank, ...)
        fixed = []
        for position, keyword in ((3, "world_size"), (4, "rank")):
            value = keyword_arg(call, keyword)
            if value is None and len(call.args) > position:
                value = call.args[position]
            if is_constant(value, int):
                fixed.append(keyword)
        if fixed:
            names = " and ".join(f"{k}=" for k in fixed)
            yield (
                "hardcoded-rank",
                call,
                f"init_process_group with a number for {names} fixes what torchrun sets for each"
                f" process: drop it (torchrun passes it in the environment) or read"
                f" int(os.environ['{fixed[-1].upper()}'])",
            )


# --- cuda-without-device -----------------------------------------------------------------------


def _cuda_without_device(code: Code) -> Iterator[Finding]:
    if any(call_name(c) == "set_device" for c in code.calls):
        return
    for call in code.calls:
        name = call_name(call)
        method = isinstance(call.func, ast.Attribute)
        bare_cuda = name == "cuda" and method and not call.args and not call.keywords
        first = call.args[0] if call.args else None
        to_cuda = (
            name == "to"
            and method
            and (is_constant(first, str, "cuda") or is_constant(keyword_arg(call, "device"), str, "cuda"))
        )
        device_cuda = dotted_name(call.func) in ("torch.device", "device") and is_constant(first, str, "cuda")
        device_cuda = device_cuda and len(call.args) == 1 and not call.keywords
        if bare_cuda or to_cuda or device_cuda:
            yield (
                "cuda-without-device",
                call,
                "'cuda' without an index means GPU 0 on every rank: call"
                " `torch.cuda.set_device(int(os.environ['LOCAL_RANK']))` first, or use"
                " f'cuda:{local_rank}'",
            )


# --- cuda-without-gpu --------------------------------------------------------------------------


def _cuda_without_gpu(code: Code) -> Iterator[Finding]:
    if code.target is None or code.target.no_gpu is None:
        return
    for call in code.calls:
        what = _gpu_only(call)
        if what and not guarded(code, call, set(), _gpuish):
            yield (
                "cuda-without-gpu",
                call,
                f"this job has no GPU ({code.target.no_gpu}) and `{what}` fails without one: run it only"
                " `if torch.cuda.is_available():` (on CPU use the gloo backend and the 'cpu' device)",
            )


def _gpu_only(call: ast.Call) -> str:
    """What the call does that needs a GPU ("" if nothing)."""
    name = call_name(call)
    method = isinstance(call.func, ast.Attribute)
    first = call.args[0] if call.args else None
    if name == "set_device" and "cuda" in dotted_name(call.func):
        return "torch.cuda.set_device(...)"
    if name == "cuda" and method:
        return ".cuda()"
    if name == "init_process_group" and is_constant(keyword_arg(call, "backend") or first, str, "nccl"):
        return 'init_process_group("nccl")'
    device = keyword_arg(call, "device") or first
    if name == "to" and method and isinstance(device, ast.Constant) and str(device.value).startswith("cuda"):
        return f".to({device.value!r})"
    return ""


def _gpuish(node: ast.AST) -> bool:
    """Whether a condition asks about GPUs (torch.cuda.is_available(), device_count(), args.cuda...)."""
    return any(w in word for word in words(node) for w in ("cuda", "gpu", "is_available", "device_count"))


# --- world-size-mismatch -----------------------------------------------------------------------


def _world_size_mismatch(code: Code) -> Iterator[Finding]:
    if code.target is None:
        return
    constants = int_constants(code.tree)
    for call in code.calls:
        name = call_name(call)
        if name == "init_process_group":
            value = keyword_arg(call, "world_size") or (call.args[3] if len(call.args) > 3 else None)
        elif dotted_name(call.func) in ("mp.spawn", "multiprocessing.spawn", "torch.multiprocessing.spawn"):
            value = keyword_arg(call, "nprocs") or (call.args[2] if len(call.args) > 2 else None)
        else:
            continue
        size = int_value(value, constants)
        if size is not None and size != code.target.world_size:
            yield (
                "world-size-mismatch",
                call,
                f"this asks for {size} processes but the job runs {code.target.world_size}"
                f" ({code.target.flags}): read int(os.environ['WORLD_SIZE']) instead, or change the flags",
            )


CHECKS: tuple[Callable[[Code], Iterator[Finding]], ...] = (
    _sampler_set_epoch,
    _unguarded_save,
    _ddp_state_dict,
    _data_parallel,
    _hardcoded_rank,
    _cuda_without_device,
    _cuda_without_gpu,
    _world_size_mismatch,
    _unguarded_writer,
    _guarded_collective_save,
)
