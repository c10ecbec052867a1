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


def optimizer_tensors(opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """A torch optimizer's per-parameter state as ``{"I.KEY": tensor}`` (I: the parameter's
    index in the optimizer; scalars such as AdamW's ``step`` as 0-d tensors)."""
    return {f"{i}.{key}": value if torch.is_tensor(value) else torch.tensor(value)
            for i, state in opt.state_dict()["state"].items() for key, value in state.items()}


def load_optimizer_tensors(opt: torch.optim.Optimizer, tensors: Mapping[str, torch.Tensor]) -> None:
    """Restore :func:`optimizer_tensors`' state (its hyper-parameters stay the optimizer's own)."""
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        i, field = key.split(".", 1)
        state.setdefault(int(i), {})[field] = value
    opt.load_state_dict({"state": state, "param_groups": opt.state_dict()["param_groups"]})


def load_parameters(module: torch.nn.Module, tensors: Mapping[str, torch.Tensor]) -> None:
    """Copy ``tensors`` (parameter name -> value, every parameter required) into ``module``'s parameters."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(tensors[name])
