"""What the labs share: batched optimizers, dtype/device resolution, seed streams, the
finite check, checkpoint state packing, the step-loop driver and the learning-rate
schedules (:mod:`.schedules`, used as ``from stagewise.engine import schedules``) (the bottom
layer, with config and errors).

The names load on first use (PEP 562): importing the package imports no torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .device import DTYPES, DeviceName, resolve_device, resolve_dtype
    from .driver import Loop, StepOutput, TrainingDriver
    from .finite import Diverged, check_finite, find_nonfinite, nonfinite_members
    from .optim import BatchedOptimizer, OptimizerName, group_norm
    from .seeds import SeedStreams, stream_word
    from .state import load_optimizer_tensors, load_parameters, optimizer_tensors, pack, unpack

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("DTYPES", "DeviceName", "resolve_device", "resolve_dtype"), ".device"),
    **dict.fromkeys(("Loop", "StepOutput", "TrainingDriver"), ".driver"),
    **dict.fromkeys(("Diverged", "check_finite", "find_nonfinite", "nonfinite_members"), ".finite"),
    **dict.fromkeys(("BatchedOptimizer", "OptimizerName", "group_norm"), ".optim"),
    **dict.fromkeys(("SeedStreams", "stream_word"), ".seeds"),
    **dict.fromkeys(("pack", "unpack", "optimizer_tensors", "load_optimizer_tensors", "load_parameters"), ".state"),
}

__all__ = ["DTYPES", "BatchedOptimizer", "DeviceName", "Diverged", "Loop", "OptimizerName", "SeedStreams", "StepOutput",
           "TrainingDriver", "check_finite", "find_nonfinite", "group_norm", "load_optimizer_tensors", "load_parameters",
           "nonfinite_members",
           "optimizer_tensors", "pack", "resolve_device", "resolve_dtype", "stream_word", "unpack"]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
