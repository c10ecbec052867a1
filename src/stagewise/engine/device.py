"""One dtype/device resolution for every lab: ``device: cpu | cuda | auto`` and dtype names.

``auto`` picks CUDA when it is available, else the CPU. Asking for ``cuda`` without a GPU
is a one-line :class:`~stagewise.errors.UserError` before any work starts.
"""

from __future__ import annotations

from typing import Literal

import torch

from ..errors import UserError

DeviceName = Literal["cpu", "cuda", "auto"]
DTYPES: dict[str, torch.dtype] = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}


def resolve_device(name: str) -> torch.device:
    """``cpu`` / ``cuda`` / ``auto`` -> a torch device."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("device=cuda: no CUDA device is available here; use device=cpu or device=auto")
    if name not in ("cpu", "cuda"):
        raise UserError(f"device={name}: must be one of cpu, cuda, auto")
    return torch.device(name)


def resolve_dtype(name: str, allowed: tuple[str, ...] = ("float64", "float32"), device: torch.device | None = None) -> torch.dtype:
    """A dtype name -> torch dtype; ``allowed`` is what the lab supports (bfloat16 only on CUDA)."""
    if name not in allowed:
        raise UserError(f"dtype={name}: this lab allows {', '.join(allowed)}")
    if name == "bfloat16" and (device is None or device.type != "cuda"):
        raise UserError("dtype=bfloat16: only on device=cuda (CPU bfloat16 is slow and inexact here); use float32")
    return DTYPES[name]
