"""One layer of normalized ReLU attention on in-context prompts, batched over members S.

A prompt is (x_1, y_1, ..., x_{L-1}, y_{L-1}, x_L) with x = [x1; x2] (P block, Q block).
The output for the query q = x_L is, per *branch* b with key-query matrix A_b::

    s_l^b = x_l^{(b)T} A_b q^{(b)}                    (bilinear score of context token l)
    split:  f = sum_b norm_l(y_l, ReLU(s_l^b))        W on the P block, V on the Q block
    joint:  f = norm_l(y_l, ReLU(sum_b s_l^b))        one ReLU over x_l^T blockdiag(W, V) q
    full:   one branch on the whole x with a full 2d x 2d matrix (outside the theory)

norm: "L" sum_l y_l r_l / L, "L-1" ... / (L-1), "sum" sum_l y_l r_l / (sum_l r_l + eps).
Loss: logistic log(1 + exp(-y_L f)) averaged over prompts (+ L2 outside this module), or,
objective "branches" (split block weights), the sum of the parts' losses
log(1 + exp(-y_L f^1)) + log(1 + exp(-y_L f^2)) (K1(W) + K2(V)): each ReLU unit is then
driven by its own output instead of f. Gradients are closed form (checked against autograd
in tests/labs/test_gradients.py).

Shapes: S members, N prompts, C = L-1 context tokens, d block dim (2d for "full").
Members that share a dataset (the same seed under several hyper-parameter variants) are
stored data-major: U datasets x K members each (S = U K); the prompt features are kept
once per dataset and the score / gradient contractions run as batched matrix products
over (dataset, prompt), so K variants cost one pass over the data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F

EPS = 1e-12


@dataclass(frozen=True)
class Branch:
    """Features of one branch, once per dataset: context (U, N, C, k), query (U, N, k)."""

    ctx: torch.Tensor
    query: torch.Tensor


@dataclass(frozen=True)
class Batch:
    """Prompts ready for the model, B branches stacked: (P, Q) for block weights (B = 2,
    k = d), (x,) for full weights (B = 1, k = 2d); ``per_data`` = K members share each of
    the U datasets (members data-major, S = U K)."""

    ctx: torch.Tensor  # (U, B, N, C, k) context features
    query: torch.Tensor  # (U, B, N, k) query features
    labels: torch.Tensor  # (S, N, C) context labels y_l
    target: torch.Tensor  # (S, N) query label y_L
    kind: torch.Tensor  # (S, N) query kind: 0 both, 1 P-only, 2 Q-only
    per_data: int = 1

    @property
    def branches(self) -> tuple[Branch, ...]:
        return tuple(Branch(self.ctx[:, b], self.query[:, b]) for b in range(self.ctx.shape[1]))


def make_batch(x1: torch.Tensor, x2: torch.Tensor, y: torch.Tensor, kind: torch.Tensor, full: bool,
               per_data: int = 1) -> Batch:
    """From prompts x1, x2 (U, N, L, d), y (U, N, L), kind (U, N, L) of U datasets, each
    shared by ``per_data`` consecutive members."""
    join = (lambda a, b: torch.cat([a, b], dim=-1).unsqueeze(1)) if full else (lambda a, b: torch.stack([a, b], dim=1))
    ctx = join(x1[:, :, :-1], x2[:, :, :-1])  # (U, B, N, C, k): one copy, straight from the views
    query = join(x1[:, :, -1], x2[:, :, -1])  # (U, B, N, k)
    expand = lambda t: t.repeat_interleave(per_data, dim=0).contiguous()  # noqa: E731  (S, ...)
    return Batch(ctx, query, expand(y[:, :, :-1]), expand(y[:, :, -1]), expand(kind[:, :, -1]), per_data)


def empty_features(datasets: int, n: int, prompt_len: int, d: int, full: bool,
                   dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Uninitialised ctx (U, B, N, C, k) and query (U, B, N, k) in :func:`make_batch`'s layout
    (block: B = 2, k = d; full: B = 1, k = 2d), to be filled through :func:`feature_slot`."""
    branches, width = (1, 2 * d) if full else (2, d)
    ctx = torch.empty(datasets, branches, n, prompt_len - 1, width, dtype=dtype)  # (U, B, N, C, k)
    query = torch.empty(datasets, branches, n, width, dtype=dtype)  # (U, B, N, k)
    return ctx, query


def feature_slot(ctx: torch.Tensor, query: torch.Tensor, dataset: int, block: int,
                 full: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of one dataset's P (block 0) or Q (block 1) features inside :func:`empty_features`'
    buffers: context (N, C, d) and query (N, d); make_batch's layout (full: the halves of k)."""
    if not full:
        return ctx[dataset, block], query[dataset, block]
    d = ctx.shape[-1] // 2
    part = slice(block * d, (block + 1) * d)
    return ctx[dataset, 0, :, :, part], query[dataset, 0, :, part]


def _by_data(t: torch.Tensor, per_data: int) -> torch.Tensor:
    """(S, ...) -> (U, K, ...)."""
    return t.view(-1, per_data, *t.shape[1:])


def scores(matrix: torch.Tensor, branch: Branch, per_data: int = 1) -> torch.Tensor:
    """s_l = x_l^T A q: matrix (S, k, k) -> (S, N, C)."""
    key_dir = torch.einsum("ukde,une->uknd", _by_data(matrix, per_data), branch.query)  # (U, K, N, k) A q
    out = torch.einsum("uncd,uknd->uknc", branch.ctx, key_dir)  # (U, K, N, C)
    return out.reshape(-1, *out.shape[2:])  # (S, N, C)


def normalize(labels: torch.Tensor, relu: torch.Tensor, normalizer: str) -> torch.Tensor:
    """norm_l(y_l, r_l): labels, relu (S, N, C) -> (S, N)."""
    total = (labels * relu).sum(-1)
    if normalizer == "L":
        return total / (labels.shape[-1] + 1)
    if normalizer == "L-1":
        return total / labels.shape[-1]
    return total / (relu.sum(-1) + EPS)


def _norm_grad(labels: torch.Tensor, relu: torch.Tensor, out: torch.Tensor, normalizer: str) -> torch.Tensor:
    """d norm / d r_l (S, N, C)."""
    if normalizer == "L":
        return labels / (labels.shape[-1] + 1)
    if normalizer == "L-1":
        return labels / labels.shape[-1]
    return (labels - out.unsqueeze(-1)) / (relu.sum(-1, keepdim=True) + EPS)


@dataclass(frozen=True)
class Forward:
    score: tuple[torch.Tensor, ...]  # per ReLU unit (S, N, C): one per branch (split) or one (joint)
    out: tuple[torch.Tensor, ...]  # per ReLU unit (S, N)
    f: torch.Tensor  # (S, N) model output


def all_scores(matrices: tuple[torch.Tensor, ...], batch: Batch) -> torch.Tensor:
    """Scores of every branch in one contraction: (S, B, N, C)."""
    stacked = torch.stack(matrices, dim=1)  # (S, B, k, k)
    per = stacked.view(-1, batch.per_data, *stacked.shape[1:])  # (U, K, B, k, k)
    key_dir = torch.einsum("ukbde,ubne->ukbnd", per, batch.query)  # (U, K, B, N, k)
    out = torch.einsum("ubncd,ukbnd->ukbnc", batch.ctx, key_dir)  # (U, K, B, N, C)
    return out.reshape(-1, *out.shape[2:])


def forward(matrices: tuple[torch.Tensor, ...], batch: Batch, output: str, normalizer: str,
            scores: torch.Tensor | None = None) -> Forward:
    """matrices: one (S, k, k) per branch (W, V) or (A_full,); ``scores`` (S, B, N, C) if
    already computed by :func:`all_scores`."""
    branch_scores = (all_scores(matrices, batch) if scores is None else scores).unbind(1)  # B x (S, N, C)
    # (a sum of a non-empty tuple of tensors is a tensor: the casts below)
    units = branch_scores if output == "split" or len(branch_scores) == 1 else [cast(torch.Tensor, sum(branch_scores))]
    outs = tuple(normalize(batch.labels, F.relu(s), normalizer) for s in units)
    return Forward(tuple(units), outs, cast(torch.Tensor, sum(outs)))


def logistic(f: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-prompt logistic loss log(1 + exp(-y f)) (S, N), stable."""
    return F.softplus(-target * f)


OBJECTIVES = ("total", "branches")


def _drives(fwd: Forward, objective: str) -> tuple[torch.Tensor, ...]:
    """The output each ReLU unit's loss is taken of, (S, N) per unit: f for every unit
    ("total"), or the unit's own output ("branches": the two parts of split block weights)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective={objective!r}: unknown; allowed: {', '.join(OBJECTIVES)}")
    if objective == "total":
        return (fwd.f,) * len(fwd.out)
    if len(fwd.out) != 2:
        raise ValueError("objective='branches' needs split output with block weights (two ReLU units, f = f1 + f2)")
    return fwd.out


def objective_loss(fwd: Forward, target: torch.Tensor, objective: str = "total") -> torch.Tensor:
    """Per-prompt loss of the trained objective, (S, N): log(1 + exp(-y f)) ("total") or
    log(1 + exp(-y f^1)) + log(1 + exp(-y f^2)) ("branches"); no L2."""
    if objective == "total":
        _drives(fwd, objective)
        return logistic(fwd.f, target)
    return cast(torch.Tensor, sum(logistic(out, target) for out in _drives(fwd, objective)))


def gradients(fwd: Forward, batch: Batch, normalizer: str, weight: torch.Tensor | None = None,
              objective: str = "total") -> tuple[torch.Tensor, ...]:
    """Gradients of the mean loss of ``objective`` (:func:`objective_loss`) w.r.t. each branch
    matrix, (S, k, k) each.

    ``weight`` (S, N) replaces the 1/N prompt weights (minibatches: 1/B on the drawn prompts).
    Unit u's score s_l gets d loss / d s_l = dloss_u * d norm / d r_l * [s_l > 0] with
    dloss_u = -y sigmoid(-y g_u), g_u = f ("total") or the unit's own output ("branches").
    """
    n = batch.target.shape[1]
    coef = []
    for s, out, drive in zip(fwd.score, fwd.out, _drives(fwd, objective)):
        dloss = -batch.target * torch.sigmoid(-batch.target * drive)  # (S, N) d loss / d drive
        dloss = dloss * weight if weight is not None else dloss / n
        relu = F.relu(s)
        grad_r = _norm_grad(batch.labels, relu, out, normalizer)  # (S, N, C)
        coef.append(dloss.unsqueeze(-1) * grad_r * (s > 0))  # (S, N, C) d loss / d s_l
    n_branch = batch.ctx.shape[1]
    if len(coef) == 1 and n_branch > 1:  # joint: one ReLU unit feeds every branch
        coef = coef * n_branch
    per = torch.stack(coef, dim=1)  # (S, B, N, C)
    per = per.view(-1, batch.per_data, *per.shape[1:])  # (U, K, B, N, C)
    weighted_ctx = torch.einsum("ukbnc,ubncd->ukbnd", per, batch.ctx)  # (U, K, B, N, k)
    grad = torch.einsum("ukbnd,ubne->ukbde", weighted_ctx, batch.query)  # (U, K, B, k, k)
    return grad.reshape(-1, *grad.shape[2:]).unbind(1)  # B x (S, k, k)


def branch_outputs(matrices: tuple[torch.Tensor, ...], batch: Batch, normalizer: str, d: int,
                   block_scores: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(f^1, f^2): the output from the P part alone and from the Q part alone, (S, N) each.

    ``block_scores`` (S, 2, N, C): the branch scores of block weights from :func:`all_scores`
    (reused so an evaluation contracts the prompts once).

    Block weights: one branch's score through the ReLU (split and joint alike). Full
    weights: the P-P block (top-left d x d) on x1, the Q-Q block on x2.
    """
    k = batch.per_data
    if len(matrices) == 2:
        if block_scores is None:
            block_scores = all_scores(matrices, batch)  # (S, 2, N, C)
        f1, f2 = (normalize(batch.labels, F.relu(block_scores[:, b]), normalizer) for b in range(2))
        return f1, f2
    full, branch = matrices[0], batch.branches[0]
    parts = []
    for sl in (slice(0, d), slice(d, 2 * d)):
        sub = Branch(branch.ctx[..., sl], branch.query[..., sl])
        parts.append(normalize(batch.labels, F.relu(scores(full[:, sl, sl], sub, k)), normalizer))
    return parts[0], parts[1]
