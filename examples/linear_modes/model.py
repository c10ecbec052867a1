"""The two-layer linear network, batched over seeds (leading axis S), in float64.

    y = W2 W1 x,   W1 (S, h, d_in),   W2 (S, d_out, h),   P = W2 W1 (S, d_out, d_in)
    loss(P) = 1/2 ||M - P||_F^2                     (whitened inputs, :mod:`.data`)
    grad_W1 = -W2^T (M - P),   grad_W2 = -(M - P) W1^T
    a_i = u_i^T P v_i                               mode i's strength, i < r

Initialisation (stream ``init`` of each seed):

- ``decoupled`` (Saxe et al.'s balanced, mode-aligned start): W1 = sqrt(a0) R V_r^T,
  W2 = sqrt(a0) U_r R^T with R (h, r) orthonormal columns, so W1 W1^T = W2^T W2 and
  P = a0 U_r V_r^T: every mode starts at a_i = a0 and the modes evolve independently;
- ``random``: i.i.d. N(0, a0 / sqrt(h)) entries, so each a_i starts ~ N(0, a0^2).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .config import Config
from .data import STREAMS, Target, haar_orthogonal


def init_weights(config: Config, seeds: list[int], target: Target) -> tuple[torch.Tensor, torch.Tensor]:
    """(W1 (S, h, d_in), W2 (S, d_out, h)) at step 0, one seed's draws per member."""
    h, a0, r = config.model.hidden, config.model.init_scale, len(config.data.singular_values)
    d_in, d_out = config.data.d_in, config.data.d_out
    if config.model.init == "random":
        std = math.sqrt(a0 / math.sqrt(h))
        draws = [STREAMS.numpy(seed, "init").standard_normal(h * (d_in + d_out)) for seed in seeds]
        flat = torch.from_numpy(std * np.stack(draws))  # (S, h d_in + d_out h)
        return flat[:, : h * d_in].reshape(-1, h, d_in), flat[:, h * d_in:].reshape(-1, d_out, h)  # (S, h, d_in), (S, d_out, h)
    R = torch.from_numpy(np.stack([haar_orthogonal(STREAMS.numpy(seed, "init"), h)[:, :r] for seed in seeds]))  # (S, h, r)
    W1 = math.sqrt(a0) * R @ target.V[:, :, :r].transpose(1, 2)  # (S, h, r) @ (S, r, d_in)
    W2 = math.sqrt(a0) * target.U[:, :, :r] @ R.transpose(1, 2)  # (S, d_out, r) @ (S, r, h)
    return W1, W2


def residual(W1: torch.Tensor, W2: torch.Tensor, target: Target) -> torch.Tensor:
    """M - W2 W1, (S, d_out, d_in)."""
    return target.M - W2 @ W1


def loss(error: torch.Tensor) -> torch.Tensor:
    """1/2 ||M - P||_F^2 per seed, (S,), from the residual (S, d_out, d_in)."""
    return 0.5 * error.square().sum(dim=(1, 2))


def gradients(W1: torch.Tensor, W2: torch.Tensor, error: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_W1 (S, h, d_in), grad_W2 (S, d_out, h)) of the loss at the residual ``error``."""
    return -W2.transpose(1, 2) @ error, -error @ W1.transpose(1, 2)


def mode_strengths(W1: torch.Tensor, W2: torch.Tensor, target: Target) -> torch.Tensor:
    """a_i = u_i^T W2 W1 v_i for the r modes, (S, r)."""
    r = target.s.shape[0]
    left = target.U[:, :, :r].transpose(1, 2) @ W2 @ W1  # (S, r, d_out) @ (S, d_out, h) @ (S, h, d_in) -> (S, r, d_in)
    return (left * target.V[:, :, :r].transpose(1, 2)).sum(dim=2)  # (S, r, d_in) -> (S, r)
