"""Batched optimizers shared by the labs: normalized GD, GD, SGD, Adam, AdamW.

Every parameter is a tensor with a leading member axis (S, ...). Per member:

* learning rate ``lr``: a float or an (S,) tensor;
* ``active`` mask (S,) bool: inactive (frozen) members do not move and do not advance
  their step count, so their bias correction is not advanced either;
* step count ``t.{name}`` (S,): the bias-correction rule of Adam/AdamW uses the member's
  own count c: ``m_hat = m / (1 - b1^c)``, ``v_hat = v / (1 - b2^c)``.

Update rules (g = gradient; names in one ``step`` call form one group):

* normalized_gd: ``p <- p - lr * g / ||g_group||_F`` (norm over the whole group, per member)
* gd, sgd:       ``p <- p - lr * g``  (sgd: the caller passes a minibatch gradient;
  ``momentum`` > 0 keeps a buffer b <- mu b + g and steps along b)
* adam:          ``p <- p - lr * m_hat / (sqrt(v_hat) + eps)``
* adamw:         ``p <- p - lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p)``  (decoupled)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

OptimizerName = Literal["normalized_gd", "gd", "sgd", "adam", "adamw"]
NORM_FLOOR = 1e-300  # a zero gradient has a zero normalized step, not NaN


def group_norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Per-member Frobenius norm over several (S, ...) tensors -> (S,)."""
    if not tensors:
        raise ValueError("group_norm needs at least one tensor")
    total = tensors[0].pow(2).flatten(1).sum(-1)  # (S,)
    for t in tensors[1:]:
        total = total + t.pow(2).flatten(1).sum(-1)
    return torch.sqrt(total)


def _per_member(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(S,) -> (S, 1, ..., 1) broadcastable against ``like`` (S, ...)."""
    return value.view(-1, *[1] * (like.dim() - 1))


@dataclass
class BatchedOptimizer:
    """Per-member optimizer state over named parameters (see the module docstring)."""

    kind: OptimizerName
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.0
    state: dict[str, torch.Tensor] = field(default_factory=dict)

    def reset(self) -> None:
        self.state = {}

    def direction(self, params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], names: list[str],
                  active: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """The update direction of each parameter (advancing moments and counts of active members)."""
        if self.kind == "normalized_gd":
            norm = group_norm([grads[n] for n in names]).clamp_min(NORM_FLOOR)  # (S,)
            return {n: grads[n] / _per_member(norm, grads[n]) for n in names}
        if self.kind in ("gd", "sgd"):
            if self.kind == "gd" or self.momentum == 0:
                return {n: grads[n] for n in names}
            out = {}
            for n in names:
                g = grads[n]
                buf = self.state.get(f"b.{n}")
                buf = g if buf is None else self.momentum * buf + g
                if active is not None and f"b.{n}" in self.state:
                    buf = torch.where(_per_member(active, g), buf, self.state[f"b.{n}"])
                self.state[f"b.{n}"] = buf
                out[n] = buf
            return out
        b1, b2 = self.betas
        out = {}
        for n in names:
            g = grads[n]
            m = self.state.get(f"m.{n}", torch.zeros_like(g))
            v = self.state.get(f"v.{n}", torch.zeros_like(g))
            count = self.state.get(f"t.{n}", torch.zeros(g.shape[0], dtype=g.dtype, device=g.device))
            m_new = b1 * m + (1 - b1) * g
            v_new = b2 * v + (1 - b2) * g * g
            if active is None:
                m, v, count = m_new, v_new, count + 1
            else:
                keep = _per_member(active, g)
                m, v = torch.where(keep, m_new, m), torch.where(keep, v_new, v)
                count = count + active.to(g.dtype)
            c = _per_member(count.clamp_min(1), g)
            upd = (m / (1 - b1 ** c)) / ((v / (1 - b2 ** c)).sqrt() + self.eps)
            if self.kind == "adamw":
                upd = upd + self.weight_decay * params[n]
            self.state.update({f"m.{n}": m, f"v.{n}": v, f"t.{n}": count})
            out[n] = upd
        return out

    def step(self, params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], names: list[str],
             lr: float | torch.Tensor, active: torch.Tensor | None = None) -> None:
        """Update ``params[n]`` for ``n`` in ``names`` in place of the dict entries.

        ``lr``: float or (S,); ``active``: (S,) bool or None (every member moves).
        """
        updates = self.direction(params, grads, names, active)
        for n in names:
            p = params[n]
            rate = _per_member(lr, p) if isinstance(lr, torch.Tensor) else lr
            moved = p - rate * updates[n]
            params[n] = moved if active is None else torch.where(_per_member(active, p), moved, p)
