"""One layer of normalized ReLU attention on in-context prompts, batched over members M.

A prompt is (x_1, y_1, ..., x_{L-1}, y_{L-1}, x_L) with x = [x1; x2] (P block, Q block).
The output for the query q = x_L is, per *branch* b with key-query matrix A_b::

    s_l^b = x_l^{(b)T} A_b q^{(b)}                    (bilinear score of context token l)
    split:  f = sum_b norm_l(y_l, ReLU(s_l^b))        W on the P block, V on the Q block
    joint:  f = norm_l(y_l, ReLU(sum_b s_l^b))        one ReLU over x_l^T blockdiag(W, V) q
    full:   one branch on the whole x with a full 2d x 2d matrix (outside the theory)

norm: "L" sum_l y_l r_l / L, "L-1" ... / (L-1), "sum" sum_l y_l r_l / (sum_l r_l + eps).
Loss: logistic log(1 + exp(-y_L f)) averaged over prompts (+ L2 outside this module).
Gradients are closed form (checked against autograd in the tests).

Shapes: M members, N prompts, C = L-1 context tokens, d block dim (2d for "full").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

EPS = 1e-12


@dataclass(frozen=True)
class Branch:
    """Features of one branch: context (M, N, C, k) and query (M, N, k) blocks."""

    ctx: torch.Tensor
    query: torch.Tensor


@dataclass(frozen=True)
class Batch:
    """Prompts ready for the model. ``branches`` are (P, Q) for block weights, (x,) for full."""

    branches: tuple[Branch, ...]
    labels: torch.Tensor  # (M, N, C) context labels y_l
    target: torch.Tensor  # (M, N) query label y_L
    kind: torch.Tensor  # (M, N) query kind: 0 both, 1 P-only, 2 Q-only


def make_batch(x1: torch.Tensor, x2: torch.Tensor, y: torch.Tensor, kind: torch.Tensor, full: bool) -> Batch:
    """From prompts x1, x2 (M, N, L, d), y (M, N, L), kind (M, N, L)."""
    feats = (torch.cat([x1, x2], dim=-1),) if full else (x1, x2)  # each (M, N, L, k)
    branches = tuple(Branch(f[:, :, :-1].contiguous(), f[:, :, -1].contiguous()) for f in feats)
    return Batch(branches, y[:, :, :-1].contiguous(), y[:, :, -1].contiguous(), kind[:, :, -1].contiguous())


def scores(matrix: torch.Tensor, branch: Branch) -> torch.Tensor:
    """s_l = x_l^T A q: matrix (M, k, k) -> (M, N, C)."""
    key_dir = torch.einsum("mde,mne->mnd", matrix, branch.query)  # (M, N, k) A q
    return torch.einsum("mncd,mnd->mnc", branch.ctx, key_dir)  # (M, N, C)


def normalize(labels: torch.Tensor, relu: torch.Tensor, normalizer: str) -> torch.Tensor:
    """norm_l(y_l, r_l): labels, relu (M, N, C) -> (M, N)."""
    total = (labels * relu).sum(-1)
    if normalizer == "L":
        return total / (labels.shape[-1] + 1)
    if normalizer == "L-1":
        return total / labels.shape[-1]
    return total / (relu.sum(-1) + EPS)


def _norm_grad(labels: torch.Tensor, relu: torch.Tensor, out: torch.Tensor, normalizer: str) -> torch.Tensor:
    """d norm / d r_l (M, N, C)."""
    if normalizer == "L":
        return labels / (labels.shape[-1] + 1)
    if normalizer == "L-1":
        return labels / labels.shape[-1]
    return (labels - out.unsqueeze(-1)) / (relu.sum(-1, keepdim=True) + EPS)


@dataclass(frozen=True)
class Forward:
    score: tuple[torch.Tensor, ...]  # per ReLU unit (M, N, C): one per branch (split) or one (joint)
    out: tuple[torch.Tensor, ...]  # per ReLU unit (M, N)
    f: torch.Tensor  # (M, N) model output


def forward(matrices: tuple[torch.Tensor, ...], batch: Batch, output: str, normalizer: str) -> Forward:
    """matrices: one (M, k, k) per branch (W, V) or (A_full,)."""
    branch_scores = [scores(a, b) for a, b in zip(matrices, batch.branches)]
    units = branch_scores if output == "split" or len(branch_scores) == 1 else [sum(branch_scores)]
    outs = tuple(normalize(batch.labels, F.relu(s), normalizer) for s in units)
    return Forward(tuple(units), outs, sum(outs))


def logistic(f: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-prompt logistic loss log(1 + exp(-y f)) (M, N), stable."""
    return F.softplus(-target * f)


def gradients(fwd: Forward, batch: Batch, normalizer: str, weight: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """Gradients of the mean logistic loss w.r.t. each branch matrix, (M, k, k) each.

    ``weight`` (M, N) replaces the 1/N prompt weights (minibatches: 1/B on the drawn prompts).
    """
    n = batch.target.shape[1]
    dloss = -batch.target * torch.sigmoid(-batch.target * fwd.f)  # (M, N) d loss / d f
    dloss = dloss * weight if weight is not None else dloss / n
    coef = []
    for s, out in zip(fwd.score, fwd.out):
        relu = F.relu(s)
        grad_r = _norm_grad(batch.labels, relu, out, normalizer)  # (M, N, C)
        coef.append(dloss.unsqueeze(-1) * grad_r * (s > 0))  # (M, N, C) d loss / d s_l
    if len(coef) == 1 and len(batch.branches) > 1:  # joint: one ReLU unit feeds every branch
        coef = coef * len(batch.branches)
    grads = []
    for c, branch in zip(coef, batch.branches):
        weighted_ctx = torch.einsum("mnc,mncd->mnd", c, branch.ctx)  # (M, N, k)
        grads.append(torch.einsum("mnd,mne->mde", weighted_ctx, branch.query))  # (M, k, k)
    return tuple(grads)


def branch_outputs(matrices: tuple[torch.Tensor, ...], batch: Batch, normalizer: str, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(f^1, f^2): the output from the P part alone and from the Q part alone, (M, N) each.

    Block weights: one branch's score through the ReLU (split and joint alike). Full
    weights: the P-P block (top-left d x d) on x1, the Q-Q block on x2.
    """
    if len(matrices) == 2:
        return tuple(normalize(batch.labels, F.relu(scores(a, b)), normalizer) for a, b in zip(matrices, batch.branches))
    full, branch = matrices[0], batch.branches[0]
    parts = []
    for sl in (slice(0, d), slice(d, 2 * d)):
        sub = Branch(branch.ctx[..., sl], branch.query[..., sl])
        parts.append(normalize(batch.labels, F.relu(scores(full[:, sl, sl], sub)), normalizer))
    return parts[0], parts[1]
