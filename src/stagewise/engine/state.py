"""One state packing for checkpoints: named groups of tensors flattened into one
``{group.name: tensor}`` dict (what safetensors stores) and back."""

from __future__ import annotations

from collections.abc import Mapping

import torch


def pack(**groups: Mapping[str, torch.Tensor] | torch.Tensor | None) -> dict[str, torch.Tensor]:
    """``pack(p={"wkq": ...}, opt=opt.state, active=mask)`` -> ``{"p.wkq": ..., "opt.m.wkq": ..., "active": ...}``.

    Tensors are moved to the CPU (checkpoints are device independent); None groups are skipped.
    """
    out: dict[str, torch.Tensor] = {}
    for group, value in groups.items():
        if value is None:
            continue
        if isinstance(value, torch.Tensor):
            out[group] = value.detach().cpu()
            continue
        for name, tensor in value.items():
            out[f"{group}.{name}"] = tensor.detach().cpu()
    return out


def unpack(tensors: Mapping[str, torch.Tensor], group: str, device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
    """The tensors of ``group`` (prefix stripped), moved to ``device`` when given."""
    prefix = f"{group}."
    out = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    return {k: v.to(device) for k, v in out.items()} if device is not None else out
