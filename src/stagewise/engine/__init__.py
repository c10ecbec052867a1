"""What the labs share: batched optimizers, dtype/device resolution, seed streams, the
finite check and checkpoint state packing (the bottom layer, with config and errors)."""

from .device import DTYPES, DeviceName, resolve_device, resolve_dtype
from .finite import Diverged, check_finite, find_nonfinite, nonfinite_members
from .optim import BatchedOptimizer, OptimizerName, group_norm
from .seeds import SeedStreams, stream_word
from .state import pack, unpack

__all__ = ["DTYPES", "BatchedOptimizer", "DeviceName", "Diverged", "OptimizerName", "SeedStreams", "check_finite",
           "find_nonfinite", "group_norm", "nonfinite_members", "pack", "resolve_device", "resolve_dtype", "stream_word", "unpack"]
