"""Algorithm 1 of Huang, Liang, Yang (NeurIPS 2024) for ONE seed, written plainly.

This is the oracle of the lab's trainer: no ensemble axis, no run store, no token-space
shortcuts, no closed-form gradients. The model works on embedded sentences and autograd
takes the gradients; :func:`stagewise.labs.ntp.train.train_two_stage` (token space,
closed-form gradients, S seeds at once) must give the same weights and losses, seed by
seed (tests/labs/ntp/test_reference.py).

Model, one sample X = [x_1 .. x_L] (token embeddings x_l in R^d, query x_L)::

    a_l = softmax_l(x_l^T W_kq x_L)              attention of the query over all L tokens
    z   = W_ov sum_l a_l x_l                     logits over the |V| tokens

Losses::

    L0(W_ov)       = (1/|V|) sum_x CE(W_ov x, n(x))        the |V| collocation samples [x] -> n(x)
    L(W_kq, W_ov)  = sum_i pi_i CE(z_i, y_i)               every distinct sample, weights pi (sum 1)

Algorithm 1 (normalized GD, both matrices start at 0 or at a small random draw)::

    stage 1, t = 1 .. T:          W_ov <- W_ov - eta0 g / ||g||_F,   g = grad L0(W_ov)
    stage 2, t = T+1 .. T+T1:     W_kq <- W_kq - eta  g / ||g||_F,   g = grad_{W_kq} L(W_kq, W_ov), W_ov frozen

When ||g||_F <= train.grad_tol round-off steers the direction: with ``on_tiny_grad: stop``
the stage ends there (the next stage still runs), with ``flag`` only a zero gradient skips
its step. ``loss_reduction: sum`` scales g, which the normalization cancels, so the
iterates are those of the mean. The other training options (joint training, Adam, factored
weights) are ablations; this module covers the paper's algorithm only.

Shapes: N samples, L positions (padded, masked), d embedding dim, V vocabulary.

Example::

    config = Config.model_validate({"train": {"steps_stage1": 50, "steps_stage2": 50}})
    run = train_reference(config, seed=0)
    run.stages[1].loss  # L at the end of stage 2
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ...engine import resolve_dtype
from ...errors import UserError
from .config import Config
from .problem import STREAMS, embedding, member_dataset
from .data import to_tensors


@dataclass(frozen=True)
class SeedData:
    """One seed's training data in embedding space."""

    emb: torch.Tensor  # (d, V) token embeddings as columns
    x: torch.Tensor  # (N, L, d) embedded sentences, 0 on padding
    mask: torch.Tensor  # (N, L) bool valid positions
    query: torch.Tensor  # (N, d) x_L, the last token of each sentence
    target: torch.Tensor  # (N,) long next token
    weight: torch.Tensor  # (N,) pi
    colloc: torch.Tensor  # (V,) long n(x)


def seed_data(config: Config, seed: int) -> SeedData:
    """The dataset and embeddings the lab draws for ``seed``, embedded (dtype: ``model.dtype``)."""
    dtype = resolve_dtype(config.model.dtype)
    ds = member_dataset(config, seed)
    emb = torch.tensor(embedding(config, ds.vocab_size, seed), dtype=dtype)  # (d, V)
    t = to_tensors(ds, ds.max_len)
    tokens = emb.T  # (V, d) one row per token
    x = tokens[t["idx"]] * t["mask"].unsqueeze(-1)  # (N, L, d)
    return SeedData(emb, x, t["mask"], tokens[t["query"]], t["next"], t["weight"].to(dtype),
                    torch.tensor(ds.collocation))


def collocation_loss(w_ov: torch.Tensor, data: SeedData) -> torch.Tensor:
    """L0: mean cross-entropy of the |V| length-1 samples [x] -> n(x) (attention is trivial)."""
    logits = (w_ov @ data.emb).T  # (V tokens, V logits): row x is W_ov x
    return F.cross_entropy(logits, data.colloc)


def main_loss(w_kq: torch.Tensor, w_ov: torch.Tensor, data: SeedData) -> torch.Tensor:
    """L: the pi-weighted cross-entropy of the one-layer transformer over all samples."""
    key_dir = data.query @ w_kq.T  # (N, d): W_kq x_L per sample
    scores = (data.x @ key_dir.unsqueeze(-1)).squeeze(-1)  # (N, L): x_l^T W_kq x_L
    attn = torch.softmax(scores.masked_fill(~data.mask, float("-inf")), dim=-1)  # (N, L)
    hidden = (attn.unsqueeze(-1) * data.x).sum(1)  # (N, d): sum_l a_l x_l
    logits = hidden @ w_ov.T  # (N, V)
    return (data.weight * F.cross_entropy(logits, data.target, reduction="none")).sum()


def normalized_gd(w: torch.Tensor, loss_of: Callable[[torch.Tensor], torch.Tensor], lr: float, steps: int,
                  grad_tol: float, stop: bool) -> None:
    """``steps`` updates W <- W - lr g / ||g||_F of ``w`` in place, g = grad of ``loss_of(w)``.

    A gradient with ||g||_F <= grad_tol ends the loop (``stop``); otherwise only a zero
    gradient skips its step.
    """
    for _ in range(steps):
        w.requires_grad_(True)
        (grad,) = torch.autograd.grad(loss_of(w), [w])  # same shape as w
        w.requires_grad_(False)
        norm = grad.norm()  # ||g||_F
        if norm <= grad_tol and stop:
            return
        if norm > 0:
            w -= lr * grad / norm


def init_weights(config: Config, seed: int, dim: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(W_kq (d, d), W_ov (V, d)): zero [paper], or i.i.d. N(0, init_scale^2) from the seed's
    "init" streams (sub-stream 0 for W_kq, 1 for W_ov, as the lab draws them)."""
    dtype = resolve_dtype(config.model.dtype)
    if config.model.init == "zero":
        return torch.zeros(dim, dim, dtype=dtype), torch.zeros(vocab, dim, dtype=dtype)
    w_kq = torch.tensor(STREAMS.numpy(seed, "init", 0).standard_normal((dim, dim)), dtype=dtype)  # (d, d)
    w_ov = torch.tensor(STREAMS.numpy(seed, "init", 1).standard_normal((vocab, dim)), dtype=dtype)  # (V, d)
    return config.model.init_scale * w_kq, config.model.init_scale * w_ov


@dataclass(frozen=True)
class StageEnd:
    """The weights and both losses after the last update of a stage."""

    step: int  # T for stage 1, T + T1 for stage 2
    wkq: torch.Tensor  # (d, d)
    wov: torch.Tensor  # (V, d)
    loss_stage1: float  # L0 (the trainer logs it as train.loss.stage1)
    loss: float  # L (logged as train.loss)


@dataclass(frozen=True)
class ReferenceRun:
    """One seed's run of Algorithm 1: the ends of stage 1 and stage 2."""

    seed: int
    stages: tuple[StageEnd, StageEnd]


def check_supported(config: Config) -> None:
    """UserError when ``config`` asks for a training this reference does not write out."""
    tc, model = config.train, config.model
    if tc.algorithm != "two_stage" or tc.optimizer != "normalized_gd" or model.factored or config.compare:
        raise UserError(f"the NTP reference loop is Algorithm 1 only (train.algorithm=two_stage, optimizer=normalized_gd, "
                        f"merged weights, no compare); got algorithm={tc.algorithm}, optimizer={tc.optimizer}, "
                        f"factored={model.factored}, compare={config.compare}")


def _stage_end(step: int, w_kq: torch.Tensor, w_ov: torch.Tensor, data: SeedData) -> StageEnd:
    with torch.no_grad():
        return StageEnd(step, w_kq.clone(), w_ov.clone(), float(collocation_loss(w_ov, data)),
                        float(main_loss(w_kq, w_ov, data)))


def train_reference(config: Config, seed: int, data: SeedData | None = None) -> ReferenceRun:
    """Algorithm 1 on ``seed``'s data with ``config``'s step sizes, step counts and guard."""
    check_supported(config)
    tc = config.train
    data = seed_data(config, seed) if data is None else data
    dim, vocab = data.emb.shape
    eta0, eta = config.step_sizes(dim)
    stop = tc.on_tiny_grad == "stop"
    w_kq, w_ov = init_weights(config, seed, dim, vocab)

    # stage 1: W_ov on the collocation loss L0
    normalized_gd(w_ov, lambda w: collocation_loss(w, data), eta0, tc.steps_stage1, tc.grad_tol, stop)
    end1 = _stage_end(tc.steps_stage1, w_kq, w_ov, data)

    # stage 2: W_ov frozen, W_kq on the main loss L
    normalized_gd(w_kq, lambda w: main_loss(w, w_ov, data), eta, tc.steps_stage2, tc.grad_tol, stop)
    end2 = _stage_end(tc.steps_stage1 + tc.steps_stage2, w_kq, w_ov, data)
    return ReferenceRun(seed, (end1, end2))
