"""Multi-process training (issue 39): which process writes, how the others wait, and the sharded
models a rank-0 probe cannot run on.

Under DDP (``torchrun``, the Trainer's ``DistributedDataParallel``) every rank runs the same
code, so every rank makes a :class:`~stagewise.orchestrate.track.Tracker` (or the Trainer's
callback). Only the main process (rank 0) makes and writes the run folder and runs the probe;
the other ranks check the same inputs, answer every ``step`` with the decision rank 0 takes,
and wait at a barrier while rank 0 probes, so no rank runs ahead of a probe:

=================  =====================================================================
rank 0             opens the run folder, probes when due, then joins the barrier
other ranks        no folder, no file, no probe; join the same barrier at the same steps
=================  =====================================================================

The ranks must agree on which steps probe, or the barrier deadlocks. The fixed schedules
(``every=k``, ``schedule="log"``, ``steps=[...]``) and ``force=True`` are the same on every
rank by construction; the budget rule's decision depends on rank 0's clock, so rank 0 takes it
and broadcasts it (:func:`broadcast_from_main`), and the last record of a resumed run is
broadcast when the run is opened. Without an initialised process group nothing is exchanged:
no barrier, and a rank other than 0 answers a budget-rule step with False (it cannot know).

Sharded models (FSDP, DeepSpeed ZeRO-3) hold a slice of each weight per rank: a forward on
rank 0 alone would hang, so they are refused up front (:func:`check_not_sharded`).
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import UserError

SHARDED_HINT = ("probing a sharded model (FSDP, DeepSpeed ZeRO-3) is not supported: a forward pass on rank 0 alone would "
                "hang; save checkpoints during training and probe them as a trajectory (`stagewise LAB trajectory`), or train with DDP")


def process_rank() -> int:
    """This process's global rank: ``torch.distributed``'s when a process group is initialised,
    else the ``RANK`` variable that ``torchrun`` sets (0 when unset or not a whole number)."""
    dist = _dist()
    if dist is not None:
        return int(dist.get_rank())
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _dist() -> Any:
    """``torch.distributed`` when a process group of more than one process is initialised, else None."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def synchronised() -> bool:
    """Whether the ranks can wait for each other (a process group of more than one process)."""
    return _dist() is not None


def barrier() -> None:
    """Every rank waits here until all have arrived (nothing without a process group)."""
    dist = _dist()
    if dist is not None:
        dist.barrier()


def broadcast_from_main(value: int) -> int:
    """Rank 0's ``value`` on every rank (an int64; ``value`` as given without a process group).
    Every rank must call it at the same point."""
    dist = _dist()
    if dist is None:
        return value
    import torch

    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    box = torch.tensor([value], dtype=torch.int64, device=device)
    dist.broadcast(box, src=0)
    return int(box.item())


def unwrapped(model: Any) -> Any:
    """The module inside a ``DistributedDataParallel`` wrapper (its forward would synchronise
    with the other ranks), else ``model``."""
    from torch.nn.parallel import DistributedDataParallel

    return model.module if isinstance(model, DistributedDataParallel) else model


def check_not_sharded(model: Any) -> None:
    """One UserError line when ``model`` is sharded across ranks: a module wrapped by FSDP
    (``FullyShardedDataParallel``, FSDP2's ``FSDPModule``, or the ``_fsdp_wrapped_module`` it
    keeps), weights that are ``DTensor``, or weights carrying DeepSpeed ZeRO-3's ``ds_id`` /
    ``ds_status`` attributes."""
    modules = model.modules() if hasattr(model, "modules") else [model]
    for module in modules:
        if isinstance(module, _fsdp_classes()) or hasattr(module, "_fsdp_wrapped_module"):
            raise UserError(f"model: wrapped in FSDP ({type(module).__name__}); {SHARDED_HINT}")
    parameters = model.parameters() if hasattr(model, "parameters") else []
    dtensor = _dtensor_class()
    for parameter in parameters:
        if dtensor is not None and isinstance(parameter, dtensor):
            raise UserError(f"model: its weights are DTensors (sharded, FSDP2 or tensor parallel); {SHARDED_HINT}")
        if hasattr(parameter, "ds_id") or hasattr(parameter, "ds_status"):
            raise UserError(f"model: its weights are partitioned by DeepSpeed ZeRO-3; {SHARDED_HINT}")


def check_trainer_not_sharded(args: Any) -> None:
    """One UserError line when the Trainer's arguments ask for FSDP or DeepSpeed ZeRO-3 (before
    the Trainer has wrapped the model)."""
    if getattr(args, "fsdp", None) or os.environ.get("ACCELERATE_USE_FSDP", "").lower() in ("1", "true"):
        raise UserError(f"TrainingArguments: FSDP is on (fsdp={getattr(args, 'fsdp', None)!r}); {SHARDED_HINT}")
    if getattr(args, "deepspeed", None):
        try:
            from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
        except ImportError:  # pragma: no cover (an older transformers)
            return
        if is_deepspeed_zero3_enabled():
            raise UserError(f"TrainingArguments: DeepSpeed ZeRO-3 is on; {SHARDED_HINT}")


def _fsdp_classes() -> tuple[type, ...]:
    """The FSDP wrapper classes this torch has (FSDP1, FSDP2)."""
    classes: list[type] = []
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel

        classes.append(FullyShardedDataParallel)
    except ImportError:  # pragma: no cover (a torch built without distributed)
        pass
    try:
        from torch.distributed.fsdp import FSDPModule

        classes.append(FSDPModule)
    except ImportError:  # pragma: no cover (torch < 2.6)
        pass
    return tuple(classes)


def _dtensor_class() -> type | None:
    try:
        from torch.distributed.tensor import DTensor

        return DTensor
    except ImportError:  # pragma: no cover (a torch built without distributed)
        return None
