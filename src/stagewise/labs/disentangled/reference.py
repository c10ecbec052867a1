"""The disentangled lab's training for ONE seed, written plainly: full-batch GD with a large
then annealed learning rate, L2 and Li-Wei-Ma update noise (Gong, Li, Liu, Teng 2025, as
reconstructed in docs/disentangled.md).

This is the oracle of the lab's batched trainer: no ensemble axis, no shared-dataset layout,
no closed-form gradients, no run store. Autograd takes the gradients; the lab's batched
training (``train.py``: seeds x variants x controls as one ensemble, prompts shared per
seed) must give the same weights and losses for each seed (tests/labs/disentangled/test_reference.py).

Prompt n: context tokens x_l = [x_l1; x_l2] with labels y_l (l = 1 .. L-1), query q = x_L,
target y_L. Split output, block weights (W on the P block, V on the Q block)::

    s_l^1 = x_l1^T W q_1,   s_l^2 = x_l2^T V q_2                  bilinear scores
    f     = (1/L) sum_{l<L} y_l [ReLU(s_l^1) + ReLU(s_l^2)]       = f^1(W) + f^2(V)

Objective and update t = 1 .. steps (W, V start i.i.d. N(0, sigma0^2))::

    loss(W, V) = (1/N) sum_n log(1 + exp(-y_L^n f_n)) + (lambda/2)(||W||_F^2 + ||V||_F^2)
    lr_t       = eta1 for t <= t1, eta2 after                     (step annealing)
    W <- W - lr_t grad_W loss,  V <- V - lr_t grad_V loss
    W <- W + noise lr_t xi_W,   V <- V + noise lr_t xi_V          xi ~ N(0, 1) per entry

Randomness: the seed's named streams (``data.STREAMS``), as the lab draws them: the
training prompts from "data.train", W and V from "init" sub-streams 0 and 1, one xi per
matrix and step (W first) from "noise". The lab's other options (joint or full weights,
other normalizers, the branch objective, SGD, Adam, other schedules or noise modes) are
ablations; this module writes out the default algorithm only.

Shapes: N prompts, C = L-1 context tokens, d block dimension.

Example::

    config = resolve(Config, {"train": {"t1": 20, "steps": 40}})
    run = train_reference(config, seed=0)
    run.stages[0].loss  # training loss at t1
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ...engine import resolve_dtype
from ...errors import UserError
from .config import Config
from .data import STREAMS, sample_prompts
from .ensemble import data_spec


@dataclass(frozen=True)
class SeedData:
    """One seed's training prompts, split into context and query."""

    ctx1: torch.Tensor  # (N, C, d) P blocks x_l1 of the context tokens
    ctx2: torch.Tensor  # (N, C, d) Q blocks x_l2
    query1: torch.Tensor  # (N, d) q_1
    query2: torch.Tensor  # (N, d) q_2
    labels: torch.Tensor  # (N, C) context labels y_l
    target: torch.Tensor  # (N,) query label y_L


def seed_data(config: Config, seed: int) -> SeedData:
    """The N training prompts the lab draws for ``seed`` (dtype: ``model.dtype``)."""
    dtype = resolve_dtype(config.model.dtype)
    p = sample_prompts(data_spec(config), [seed], config.data.n_train, "train", dtype)
    x1, x2, y = p.x1[0], p.x2[0], p.y[0]  # (N, L, d), (N, L, d), (N, L)
    return SeedData(x1[:, :-1], x2[:, :-1], x1[:, -1], x2[:, -1], y[:, :-1], y[:, -1])


@dataclass(frozen=True)
class Losses:
    """Training losses at some weights (means over the N prompts)."""

    loss: float  # logistic loss of f
    loss_l2: float  # the objective: loss + (lambda/2)(||W||^2 + ||V||^2)
    k1: float  # K^1: logistic loss of f^1 alone
    k2: float  # K^2: logistic loss of f^2 alone


def branch_outputs(w: torch.Tensor, v: torch.Tensor, data: SeedData) -> tuple[torch.Tensor, torch.Tensor]:
    """(f^1, f^2), each (N,): (1/L) sum_l y_l ReLU(score) of the P branch and of the Q branch."""
    prompt_len = data.labels.shape[1] + 1  # L
    s1 = torch.einsum("ncd,nd->nc", data.ctx1, data.query1 @ w.T)  # (N, C): x_l1^T W q_1
    s2 = torch.einsum("ncd,nd->nc", data.ctx2, data.query2 @ v.T)  # (N, C): x_l2^T V q_2
    return (data.labels * F.relu(s1)).sum(-1) / prompt_len, (data.labels * F.relu(s2)).sum(-1) / prompt_len


def objective(w: torch.Tensor, v: torch.Tensor, data: SeedData, l2: float) -> torch.Tensor:
    """Mean logistic loss of f = f^1 + f^2 plus (lambda/2)(||W||_F^2 + ||V||_F^2)."""
    f1, f2 = branch_outputs(w, v, data)
    return F.softplus(-data.target * (f1 + f2)).mean() + 0.5 * l2 * (w.pow(2).sum() + v.pow(2).sum())


def losses(w: torch.Tensor, v: torch.Tensor, data: SeedData, l2: float) -> Losses:
    """The training losses at (W, V) (no gradient)."""
    with torch.no_grad():
        f1, f2 = branch_outputs(w, v, data)
        loss = F.softplus(-data.target * (f1 + f2)).mean()
        penalty = 0.5 * l2 * (w.pow(2).sum() + v.pow(2).sum())
        return Losses(float(loss), float(loss + penalty), float(F.softplus(-data.target * f1).mean()),
                      float(F.softplus(-data.target * f2).mean()))


def init_weights(config: Config, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(W, V), each (d, d) i.i.d. N(0, sigma0^2), from the seed's "init" sub-streams 0 and 1."""
    d, dtype = config.data.d, resolve_dtype(config.model.dtype)
    draws = [torch.randn(d, d, generator=STREAMS.torch(seed, "init", k), dtype=torch.float64) for k in (0, 1)]
    return (config.model.init_scale * draws[0]).to(dtype), (config.model.init_scale * draws[1]).to(dtype)


@dataclass(frozen=True)
class StageEnd:
    """The weights and training losses after the last update of a stage."""

    step: int  # t1 for stage 1, steps for stage 2
    w: torch.Tensor  # (d, d)
    v: torch.Tensor  # (d, d)
    losses: Losses


@dataclass(frozen=True)
class ReferenceRun:
    """One seed's run: the ends of the elementary stage (t1) and of the specialized one (steps)."""

    seed: int
    stages: tuple[StageEnd, StageEnd]


SUPPORTED = {("train", "optimizer"): "gd", ("train", "schedule"): "step", ("train", "objective"): "total",
             ("train", "noise_mode"): "lr", ("model", "output"): "split", ("model", "weights"): "block",
             ("model", "normalizer"): "L"}
"""The options this reference writes out, as (section, field) -> value."""


def check_supported(config: Config) -> None:
    """UserError naming every option of ``config`` outside :data:`SUPPORTED`."""
    wrong = [f"{section}.{name}={getattr(getattr(config, section), name)}" for (section, name), value in SUPPORTED.items()
             if getattr(getattr(config, section), name) != value]
    if wrong:
        allowed = ", ".join(f"{s}.{n}={v}" for (s, n), v in SUPPORTED.items())
        raise UserError(f"the disentangled reference loop covers {allowed} only; got {', '.join(wrong)}")


def train_reference(config: Config, seed: int, data: SeedData | None = None) -> ReferenceRun:
    """GD with step annealing, L2 and update noise on ``seed``'s prompts (the module docstring)."""
    check_supported(config)
    tc = config.train
    data = seed_data(config, seed) if data is None else data
    w, v = init_weights(config, seed)
    noise = STREAMS.torch(seed, "noise")
    ends = [StageEnd(0, w, v, losses(w, v, data, tc.l2))] if tc.t1 == 0 else []
    for t in range(1, tc.steps + 1):
        lr = tc.lr_stage1 if t <= tc.t1 else tc.lr_stage2
        w, v = w.detach().requires_grad_(True), v.detach().requires_grad_(True)  # fresh leaves for autograd
        grad_w, grad_v = torch.autograd.grad(objective(w, v, data, tc.l2), [w, v])  # (d, d) each
        with torch.no_grad():
            w, v = w - lr * grad_w, v - lr * grad_v  # new tensors: a stored stage end keeps its values
            if tc.noise > 0:
                w = w + tc.noise * lr * torch.randn(w.shape, generator=noise, dtype=torch.float64).to(w.dtype)
                v = v + tc.noise * lr * torch.randn(v.shape, generator=noise, dtype=torch.float64).to(v.dtype)
        if t in (tc.t1, tc.steps):
            ends.append(StageEnd(t, w, v, losses(w, v, data, tc.l2)))
    if tc.t1 == tc.steps:  # no stage 2: it ends where stage 1 does
        ends.append(ends[-1])
    return ReferenceRun(seed, (ends[0], ends[1]))
