"""Attainable floors K1*, K2* of the disentangled lab: the noise-free L2 optimum of each member.

Numerical floor (the reference). For every member (deduplicated: seed, lambda, data fields
and control flag decide the problem) minimise the run's own objective on the member's own
training prompts (a control's: its shuffled targets), from each declared start
(``experiment.floor_starts``: its own initial weights, a fresh small draw, the signal-aligned
weights, a large random draw; :mod:`.floor_starts`), and keep the lowest objective found
(J is non-convex: one start's optimum is a local one)::

    J(X) = (1/N) sum_n loss_n + (lambda/2) ||X||^2,      X = (W, V) (or the full matrix)
    loss_n = softplus(-y_n f_n)                            train.objective = total
           = softplus(-y_n f^1_n) + softplus(-y_n f^2_n)   train.objective = branches

then evaluate each start's optimum on the TEST prompts with the lab's own metrics (metrics.evaluate:
K1* = test.K1.p_queries, K2* = test.K2.q_queries, ...) and the mean margins m_P* = mean y f^1
over P-bearing, m_Q* = mean y f^2 over Q-bearing test queries.

J is piecewise smooth (every ReLU gate is a kink) and its minimum sits ON kinks: a context
token whose label disagrees with the query's (xor Q: its score is noise around 0) adds
c_a ReLU(s_a) with c_a = dJ / dReLU(s_a) > 0, a one-sided penalty, so the optimum keeps a few
such scores exactly at 0 (about 10 of the 7600 Q scores at the default). There the gradient
does not vanish: GD and L-BFGS stall at max |grad| ~ 5e-6. The stationarity measure is the
minimum-norm Clarke subgradient over the kinks Z the iterate sits on (|s_a| <= ZERO_REL rms)::

    r = grad J_Z(X) + sum_{a in Z} theta_a c_a dS_a,  theta in [0, 1]^Z minimising ||r||_2

(J_Z: J with the gates of Z off; dS_a = d s_a / dX; box least squares, scipy's BVLS), and a
member is converged when max |r| < GRAD_TOL (incl. the L2 term).

Solver: a semismooth Newton (SQP) method, batched over members as a tensor dimension. At X
the scores near their kink (candidates A: c_a > 0, |s_a| <= NEAR_REL rms, at most MAX_NEAR
per member) are modelled as hinges, the rest of J by its second-order model with the exact
Gauss-Newton Hessian H = lambda I + Phi^T Phi (Phi: the rows sqrt(l''_n / N) d(drive_n)/dX;
exact for the 1/L and 1/(L-1) normalisers, where f is linear in X between kinks)::

    min_v  g^T v + v^T H v / 2 + sum_{a in A} c_a max(0, s_a + dS_a v)

solved through its dual, a box QP in theta in [0, 1]^A (Q = D G H^-1 G^T D, b = D (G H^-1 g - s),
D = diag(c)), with H^-1 by Woodbury in prompt space (a Cholesky of lambda I + Phi Phi^T per
member: no P x P matrix); v = -H^-1 (g + G^T D theta), then a backtracking line search on the
true J. The kinks the step lands on are hit exactly (s is linear in X). lambda = 0 has no
finite optimum: that floor is absent with the reason.

Analytic floor (the cross-check): :func:`.theory.analytic_floor`, the two-scalar fixed point,
applicable only to the family it was derived for (:func:`.theory.analytic_reason`).

Shapes: S members (unique problems), B branches of k x k (W, V; B = 1, k = 2d for full
weights), U ReLU units (split: B; joint, full: 1), R drives (loss terms: 1 for total, 2 for
branches), N train prompts, C = L - 1 context tokens, A candidate kinks, P = B k^2.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from ...engine import resolve_device
from ...engine.perf import training_threads
from .config import Config
from .floor_limits import (  # noqa: F401 (batches, floors_bytes, problem_key, the limits: re-exported)
    BATCH_BYTES, CPU_BATCH, GRAD_TOL, MAX_ITER, MAX_NEAR, MAX_WEIGHTS, batches, floor_reason, floors_bytes, problem_key,
    regime_reason, size_reason, weights_per_problem,
)
from .floor_starts import START_COLUMNS, FloorsReport, FloorTables, spread, start_weights  # noqa: F401 (FloorsReport: re-exported)
from .metrics import KINDS, evaluate
from .model import Batch, Forward, _norm_grad, all_scores, branch_outputs, gradients, normalize, objective_loss
from .train import Member, build_ensemble

SOLVE_TOL = 1e-12  # certified at GRAD_TOL (floor_limits), the iterations go on to this (or until steps stall): batching-free
STALL_ITER = 3  # ... stopped early after this many steps below STEP_TOL
STEP_TOL = 1e-14  # a step this small (max |v| / max(1, max |X|)) changes nothing in float64
NEAR_REL = 1e-2  # candidate kinks: |s_a| <= NEAR_REL * rms of the member's nonzero scores of that unit ...
ZERO_REL = 1e-10  # the kinks an iterate sits on: |s_a| <= ZERO_REL * rms
FLAT = 1e-12  # the line search accepts J(X + t v) <= J(X) + FLAT |J| (round-off: decreases of 1e-16 |J| are invisible)
MAX_HALVINGS = 40  # step halvings of the line search
SEARCH_CHUNK = 8  # the dual QP's search evaluates this many step lengths in one batched product
JITTER = 1e-12  # added to the (scaled) dual QP's matrix: more hinges than independent rows make it singular
QP_ITER = 100  # projected Newton iterations of the dual QP ...
QP_TOL = 1e-14  # ... until max |projected gradient| <= QP_TOL (the QP scaled to unit diagonal maximum)
TIME_LIMIT_S = 600.0  # a batch stops iterating after this many seconds (its rows say so): no solve runs unbounded


@dataclass(frozen=True)
class Solution:
    """One problem's optimum: weights (B, k, k), objective J*, certificate and test metrics."""

    weights: torch.Tensor
    objective: float
    grad_norm: float  # max |r|, the minimum-norm Clarke subgradient
    iterations: int
    kinks: int  # |Z|: scores held at their kink
    converged: bool
    test: dict[str, float]  # metrics.evaluate's test metrics at the optimum, plus m_P, m_Q
    timed_out: bool = False  # stopped at TIME_LIMIT_S before converging


class _Problem:
    """J and its pieces for a batch of members: value, gradient, kink coefficients, Newton rows."""

    def __init__(self, config: Config, batch: Batch, l2: torch.Tensor):
        self.config, self.batch, self.l2 = config, batch, l2
        self.split = config.model.output == "split" or batch.ctx.shape[1] == 1
        self.live = self._nonzero_features()  # (S, U, N, C)
        self._grams: torch.Tensor | None = None  # query_grams of each dataset

    def take(self, keep: torch.Tensor) -> "_Problem":
        """The same problems restricted to the members ``keep`` (sorted indices, (S',)): a member
        that has converged stops costing anything (no member waits for another). Their datasets'
        features are shared when every kept dataset keeps the same number of members (a member's
        starts, the CPU's batches); otherwise each kept member gets its dataset's rows (a copy)."""
        batch = self.batch
        data = torch.div(keep, batch.per_data, rounding_mode="floor")  # (S',) dataset of each kept member
        datasets, counts = torch.unique_consecutive(data, return_counts=True)
        uniform = bool((counts == counts[0]).all())
        rows, per = (datasets, int(counts[0])) if uniform else (data, 1)
        sub = Batch(batch.ctx[rows], batch.query[rows], batch.labels[keep], batch.target[keep], batch.kind[keep], per)
        problem = _Problem.__new__(_Problem)
        problem.config, problem.batch, problem.l2, problem.split = self.config, sub, self.l2[keep], self.split
        problem.live, problem._grams = self.live[keep], None
        return problem

    def query_grams(self) -> torch.Tensor:
        """q_n . q_m per branch and dataset, (D, 1, B, N, N) (computed once: X does not change it)."""
        if self._grams is None:
            query = self.batch.query  # (D, B, N, k)
            self._grams = (query @ query.transpose(-1, -2)).unsqueeze(1)  # (D, 1, B, N, N)
        return self._grams

    def _nonzero_features(self) -> torch.Tensor:
        """(S, U, N, C): the scores that move with X (context and query features of the unit nonzero)."""
        batch = self.batch
        live = (batch.ctx.pow(2).sum(-1) > 0) & (batch.query.pow(2).sum(-1) > 0).unsqueeze(-1)  # (D, B, N, C)
        live = live if self.split else live.any(1, keepdim=True)  # (D, U, N, C)
        return live.repeat_interleave(batch.per_data, dim=0)  # (S, U, N, C)

    def forward(self, x: torch.Tensor) -> Forward:
        """model.forward (split, joint or full) of X (S, B, k, k)."""
        scores = all_scores(tuple(x.unbind(1)), self.batch)  # (S, B, N, C)
        units = scores if self.split else scores.sum(1, keepdim=True)  # (S, U, N, C)
        outs = tuple(normalize(self.batch.labels, F.relu(s), self.config.model.normalizer) for s in units.unbind(1))
        return Forward(tuple(units.unbind(1)), outs, sum(outs[1:], outs[0]))

    def value(self, fwd: Forward, x: torch.Tensor) -> torch.Tensor:
        """J (S,)."""
        return objective_loss(fwd, self.batch.target, self.config.train.objective).mean(-1) + 0.5 * self.l2 * x.pow(2).flatten(1).sum(-1)

    def grad(self, fwd: Forward, x: torch.Tensor, kinks: "_Kinks | None" = None, coef: torch.Tensor | None = None) -> torch.Tensor:
        """grad J (S, B, k, k); with ``kinks`` (and their c, (S, A)) grad J_A: without the
        contributions c_a [s_a > 0] dS_a of those gates (J_A: their ReLU terms taken out)."""
        grads = gradients(fwd, self.batch, self.config.model.normalizer, None, self.config.train.objective)
        grad = torch.stack(grads, 1) + self.l2.view(-1, 1, 1, 1) * x
        if kinks is None or coef is None:
            return grad
        return grad - kinks.adjoint(coef * (kinks.gather(torch.stack(fwd.score, 1)) > 0))

    def drives(self, fwd: Forward) -> tuple[torch.Tensor, ...]:
        """The outputs the loss terms are taken of, (S, N) each: (f,) or (f^1, f^2)."""
        return (fwd.f,) if self.config.train.objective == "total" else fwd.out

    def relu_coefficients(self, fwd: Forward) -> torch.Tensor:
        """c = dJ / dReLU(s) per unit, prompt and context token, (S, U, N, C)."""
        drives = self.drives(fwd) * (len(fwd.out) if self.config.train.objective == "total" else 1)
        y, out = self.batch.target, []
        for s, unit_out, g in zip(fwd.score, fwd.out, drives):
            dloss = -y * torch.sigmoid(-y * g) / y.shape[1]  # (S, N)
            out.append(dloss.unsqueeze(-1) * _norm_grad(self.batch.labels, F.relu(s), unit_out, self.config.model.normalizer))
        return torch.stack(out, 1)

    def newton_rows(self, fwd: Forward, hinges: torch.Tensor) -> torch.Tensor:
        """Phi (S, R, N, B, k): row (r, n) is sqrt(l''_rn / N) d drive_rn / dX = sum_b e_b w_rnb q_nb^T
        without the gates of ``hinges`` (S, U, N, C) (only w is stored; q is the prompt's query)."""
        batch, S = self.batch, self.batch.target.shape[0]
        D, B, N, _, k = batch.ctx.shape
        y, drives = batch.target, self.drives(fwd)
        rows = torch.zeros(S, len(drives), N, B, k, dtype=batch.ctx.dtype, device=batch.ctx.device)
        for u, (s, unit_out) in enumerate(zip(fwd.score, fwd.out)):
            alpha = _norm_grad(batch.labels, F.relu(s), unit_out, self.config.model.normalizer) * ((s > 0) & ~hinges[:, u])  # (S, N, C)
            alpha = alpha.view(D, -1, N, alpha.shape[-1])  # (D, K, N, C)
            r = 0 if len(drives) == 1 else u
            for b in ([u] if self.split and B > 1 else range(B)):
                rows[:, r, :, b] += torch.einsum("dknc,dncq->dknq", alpha, batch.ctx[:, b]).reshape(S, N, k)  # (S, N, k)
        curvature = torch.stack([torch.sigmoid(y * g) * torch.sigmoid(-y * g) for g in drives], 1) / N  # (S, R, N) l''
        return rows * curvature.sqrt()[..., None, None]


class _Kinks:
    """Rows dS_a of a padded kink set: idx (S, A) into the flattened (U, N, C) grid, valid
    (S, A); dS_a = sum_b e_b x_{a,b} q_{a,b}^T, kept as ctx, query (S, A, B, k)."""

    def __init__(self, problem: _Problem, mask: torch.Tensor):
        batch, S = problem.batch, mask.shape[0]
        counts = mask.flatten(1).sum(-1)  # (S,)
        width = max(1, int(counts.max()))
        order = torch.sort(mask.flatten(1).to(torch.int8), dim=1, descending=True, stable=True).indices[:, :width]  # (S, A)
        self.valid = torch.arange(width, device=mask.device).unsqueeze(0) < counts.unsqueeze(1)  # (S, A)
        self.idx = order
        n_units, N, C = mask.shape[1:]
        unit, n, c = order // (N * C), (order // C) % N, order % C  # (S, A) each
        data = torch.arange(S, device=mask.device) // batch.per_data  # (S,) dataset of each member
        ctx = batch.ctx[data.unsqueeze(1), :, n, c]  # (S, A, B, k)
        if n_units > 1:  # split: unit a's score reads its own branch only
            ctx = ctx * F.one_hot(unit, ctx.shape[2]).to(ctx.dtype).unsqueeze(-1)  # (S, A, B, k)
        self.ctx = ctx * self.valid.to(ctx.dtype)[..., None, None]
        self.query = batch.query[data.unsqueeze(1), :, n]  # (S, A, B, k)

    def gather(self, values: torch.Tensor) -> torch.Tensor:
        """(S, U, N, C) -> (S, A), 0 on padding."""
        return values.flatten(1).gather(1, self.idx) * self.valid

    def gram(self) -> torch.Tensor:
        """G G^T (S, A, A)."""
        return (torch.einsum("mabk,mcbk->mbac", self.ctx, self.ctx) * torch.einsum("mabl,mcbl->mbac", self.query, self.query)).sum(1)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """G x = (s_a)_a: (S, B, k, k) -> (S, A)."""
        return torch.einsum("mabk,mbkl,mabl->ma", self.ctx, x, self.query)

    def adjoint(self, u: torch.Tensor) -> torch.Tensor:
        """G^T u: (S, A) -> (S, B, k, k)."""
        return torch.einsum("ma,mabk,mabl->mbkl", u * self.valid, self.ctx, self.query)

    def columns(self, m: int, coef: torch.Tensor) -> torch.Tensor:
        """Member m's c_a dS_a as the columns of a (P, A_m) matrix."""
        n = int(self.valid[m].sum())
        return (coef[m, :n, None] * torch.einsum("abk,abl->abkl", self.ctx[m, :n], self.query[m, :n]).flatten(1)).T


def _box_qp(q: torch.Tensor, b: torch.Tensor, valid: torch.Tensor, start: torch.Tensor | None = None) -> torch.Tensor:
    """argmin theta^T q theta / 2 + b^T theta over [0, 1]^A, batched over members (q PSD,
    (S, A, A); padding fixed at 0), from ``start`` (S, A) (clipped to the box; default 0):
    Bertsekas' projected Newton method. Each iteration fixes
    the bound variables the gradient pushes outwards, takes the Newton step on the others
    (batched Cholesky, JITTER added to the scaled matrix) and backtracks along the projection
    arc. A member stops when its projected gradient is below QP_TOL of its scale (finite once
    the bound set is right) or when its search found no decrease (its next iteration would be
    the same computation: round-off can keep the gradient above QP_TOL); the others go on
    without it, so no member waits for another and each member's iterates are those of its
    own solve."""
    scale = q.diagonal(dim1=1, dim2=2).amax(-1).clamp_min(1e-300)  # (S,)
    q, b = q / scale[:, None, None], b / scale[:, None]
    eye = torch.eye(q.shape[-1], dtype=q.dtype, device=q.device)
    halvings = 0.5 ** torch.arange(MAX_HALVINGS, dtype=q.dtype, device=q.device)  # (H,) the search's t, 1 first
    theta = torch.zeros_like(b) if start is None else start.clamp(0.0, 1.0) * valid
    active = torch.nonzero(valid.any(-1)).flatten()  # (S',) members still iterating
    taken: torch.Tensor | None = None
    for _ in range(QP_ITER):
        if active.numel() == 0:
            break
        if taken is None or not torch.equal(taken, active):  # the active members' data, re-taken when one stops
            taken, qa, ba, ok_a = active, q[active], b[active], valid[active]  # (S', A, A), (S', A), (S', A)
        th = theta[active]  # (S', A)
        grad = (qa @ th.unsqueeze(-1)).squeeze(-1) + ba  # (S', A)
        projected = ((th - (th - grad).clamp(0.0, 1.0)) * ok_a).abs().amax(-1)  # (S',)
        going = projected > QP_TOL
        fixed = ~ok_a | ((th <= 0) & (grad > 0)) | ((th >= 1) & (grad < 0))  # (S', A)
        free = (~fixed).to(q.dtype)
        reduced = qa * free.unsqueeze(-1) * free.unsqueeze(-2) + torch.diag_embed(1.0 - free) + JITTER * eye
        step = torch.cholesky_solve((-grad * free).unsqueeze(-1), torch.linalg.cholesky(reduced)).squeeze(-1)  # (S', A)
        current = 0.5 * (th * (grad + ba)).sum(-1)  # (S',) th^T q th / 2 + b^T th = th^T (q th + 2 b) / 2
        new = th.clone()
        for first in range(0, len(halvings), SEARCH_CHUNK):  # SEARCH_CHUNK step lengths per batched evaluation
            t = halvings[first:first + SEARCH_CHUNK]  # (T,)
            trial = (th.unsqueeze(1) + t[:, None] * step.unsqueeze(1)).clamp(0.0, 1.0) * ok_a.unsqueeze(1)  # (S', T, A)
            values = 0.5 * (trial * (trial @ qa)).sum(-1) + (trial * ba.unsqueeze(1)).sum(-1)  # (S', T) (qa symmetric)
            ok = (values <= current.unsqueeze(1)) & going.unsqueeze(1)  # (S', T)
            hit = ok.any(-1)  # (S',)
            pick = ok.to(torch.int8).argmax(-1)  # (S',) the first acceptable t of the chunk
            new = torch.where(hit.unsqueeze(-1), trial[torch.arange(len(th), device=th.device), pick], new)
            going = going & ~hit
            if not bool(going.any()):
                break
        moved = (new != th).any(-1)  # a member that did not move would repeat this iteration exactly
        theta[active] = new
        active = active[moved & (projected > QP_TOL)]
    return theta


def _newton_step(problem: _Problem, x: torch.Tensor, fwd: Forward, near: torch.Tensor,
                 duals: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(v (S, B, k, k), duals (S, U N C)): the SQP step at x (``fwd`` its forward) with the kinks
    ``near`` (S, U, N, C) as hinges, and the hinges' dual theta on the (U, N, C) grid (0 off
    the hinges). The dual QP starts from ``duals``, the previous step's: the hinge set changes
    little between Newton iterations, and since H is positive definite the step depends on the
    QP's solution only through G^T D theta, which every optimum of the (convex) QP shares, so
    the start changes the step only within the QP's tolerance."""
    kinks = _Kinks(problem, near)
    coef = kinks.gather(problem.relu_coefficients(fwd))  # (S, A)
    grad = problem.grad(fwd, x, kinks, coef)  # grad J_S: the hinges' terms out
    rows = problem.newton_rows(fwd, near)  # (S, R, N, B, k)
    S, R, N, B, _ = rows.shape
    query = problem.batch.query.repeat_interleave(problem.batch.per_data, dim=0)  # (S, B, N, k)
    lam = problem.l2.view(-1, 1, 1)
    inner = lam * torch.eye(R * N, dtype=x.dtype, device=x.device)  # (S, RN, RN): lambda I + Phi Phi^T
    grams = problem.query_grams()  # (D, 1, B, N, N): one per dataset, broadcast over its members
    for b in range(B):
        w = rows[:, :, :, b].reshape(S, R * N, -1)  # (S, RN, k)
        gram = grams[:, :, b] if R == 1 else grams[:, :, b].repeat(1, 1, R, R)  # (D, 1, RN, RN)
        inner = inner + ((w @ w.transpose(1, 2)).view(gram.shape[0], -1, R * N, R * N) * gram).view(S, R * N, R * N)
    chol = torch.linalg.cholesky(inner)
    phi = lambda u: torch.stack([torch.einsum("mrnk,mkl,mnl->mrn", rows[:, :, :, b], u[:, b], query[:, b])  # noqa: E731
                                 for b in range(B)]).sum(0).reshape(S, R * N)  # Phi u: (S, B, k, k) -> (S, RN)
    phi_t = lambda z: torch.stack([torch.einsum("mrn,mrnk,mnl->mkl", z.view(S, R, N), rows[:, :, :, b], query[:, b])  # noqa: E731
                                   for b in range(B)], 1)  # Phi^T z: (S, RN) -> (S, B, k, k)
    solve = lambda z: torch.cholesky_solve(z, chol)  # noqa: E731
    if bool(near.any()):  # the dual box QP of the hinges
        scores = kinks.apply(x)  # (S, A) the hinges' true scores
        phi_g = torch.stack([torch.einsum("mrnk,mak->mrna", rows[:, :, :, b], kinks.ctx[:, :, b])
                             * torch.einsum("mnk,mak->mna", query[:, b], kinks.query[:, :, b]).unsqueeze(1) for b in range(B)]).sum(0)
        phi_g = phi_g.reshape(S, R * N, -1)  # (S, RN, A) Phi G^T
        half = torch.linalg.solve_triangular(chol, torch.cat([phi_g, phi(grad).unsqueeze(-1)], -1), upper=False)  # (S, RN, A + 1)
        half_g, half_grad = half[..., :-1], half[..., -1:]  # L^-1 Phi G^T, L^-1 Phi grad
        g_hinv_gt = (kinks.gram() - half_g.transpose(1, 2) @ half_g) / lam  # (S, A, A) G H^-1 G^T
        g_hinv_g = (kinks.apply(grad) - (half_g.transpose(1, 2) @ half_grad).squeeze(-1)) / lam.view(-1, 1)  # (S, A) G H^-1 g
        theta = _box_qp(coef.unsqueeze(-1) * g_hinv_gt * coef.unsqueeze(1), coef * (g_hinv_g - scores), kinks.valid,
                        kinks.gather(duals.view_as(near)))
        grad = grad + kinks.adjoint(coef * theta)
        duals = torch.zeros_like(duals).scatter_(1, kinks.idx, theta * kinks.valid)  # idx: distinct positions, padding off the set
    else:
        duals = torch.zeros_like(duals)
    return -(grad - phi_t(solve(phi(grad).unsqueeze(-1)).squeeze(-1))) / lam.unsqueeze(-1), duals


def _rms_masks(problem: _Problem, fwd: Forward) -> tuple[torch.Tensor, torch.Tensor]:
    """(|s| (S, U, N, C), rms (S, U, 1, 1)) of the live scores of ``fwd`` (true gates)."""
    scores = torch.stack(fwd.score, 1).abs() * problem.live  # (S, U, N, C)
    rms = (scores.pow(2).flatten(2).sum(-1) / problem.live.flatten(2).sum(-1).clamp_min(1)).sqrt()  # (S, U)
    return scores, rms[..., None, None]


def _near_kinks(problem: _Problem, fwd: Forward) -> torch.Tensor:
    """The hinge candidates (S, U, N, C): live, c > 0, |s| <= NEAR_REL rms, the MAX_NEAR closest."""
    scores, rms = _rms_masks(problem, fwd)
    near = problem.live & (problem.relu_coefficients(fwd) > 0) & (scores <= NEAR_REL * rms)
    if int(near.flatten(1).sum(-1).max()) > MAX_NEAR:
        ratio = torch.where(near, scores / rms.clamp_min(1e-300), torch.inf).flatten(1)  # (S, UNC)
        cut = ratio.kthvalue(MAX_NEAR, dim=1, keepdim=True).values  # (S, 1)
        near = near & (ratio <= cut).view_as(near)
    return near


def certificate(problem: _Problem, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(max |r| (S,), |Z| (S,)): the minimum-norm Clarke subgradient over the kinks Z the
    iterate sits on (module docstring); BVLS per member on its (P, |Z|) columns."""
    from scipy.optimize import lsq_linear

    fwd = problem.forward(x)
    scores, rms = _rms_masks(problem, fwd)
    zero = problem.live & (scores <= ZERO_REL * rms)  # (S, U, N, C)
    kinks = _Kinks(problem, zero)
    coef = kinks.gather(problem.relu_coefficients(fwd))  # (S, A)
    grad = problem.grad(fwd, x, kinks, coef)  # grad J_Z
    residual = grad.abs().flatten(1).amax(-1)
    if bool(zero.any()):
        with training_threads(1):
            for m in torch.nonzero(kinks.valid.any(-1)).flatten().tolist():
                cols, g = kinks.columns(m, coef).cpu().numpy(), grad[m].flatten().cpu().numpy()
                fit = lsq_linear(cols, -g, bounds=(0.0, 1.0), method="bvls", tol=1e-15)
                residual[m] = float(abs(g + cols @ fit.x).max())
    return residual, zero.flatten(1).sum(-1)


def _line_search(problem: "_Problem", x: torch.Tensor, step: torch.Tensor, value: torch.Tensor,
                 todo: torch.Tensor) -> torch.Tensor:
    """Backtracking along ``step`` (S, B, k, k) per member: the first t in 1, 1/2, ... (at most
    MAX_HALVINGS halvings) whose objective is at most ``value`` (S,) up to FLAT relative; members
    not ``todo`` (S,) or without such a t keep ``x``."""
    expand = lambda t: t.view(-1, 1, 1, 1)  # noqa: E731  (S,) -> (S, 1, 1, 1)
    t = torch.ones(x.shape[0], dtype=x.dtype, device=x.device)
    searching, new_x = todo.clone(), x.clone()
    for _ in range(MAX_HALVINGS):
        trial = x + expand(t) * step
        ok = searching & (problem.value(problem.forward(trial), trial) <= value + FLAT * value.abs())
        new_x = torch.where(expand(ok), trial, new_x)
        searching = searching & ~ok
        if not bool(searching.any()):
            break
        t = torch.where(searching, 0.5 * t, t)
    return new_x


def solve(config: Config, members: list[Member], time_limit: float | None = None,
          on_iteration: Callable[[int], None] | None = None, starts: Sequence[str] | None = None,
          threads: int | None = None) -> list[Solution]:
    """The numerical floors of ``members`` (each its own problem; :func:`floor_tables` deduplicates),
    member i solved from start ``starts[i]`` (:func:`.floor_starts.start_weights`; default: each
    its own initial weights), in float64 whatever the run's dtype (the certificate's GRAD_TOL is
    a float64 tolerance). The iterations stop after MAX_ITER or ``time_limit`` seconds (default
    TIME_LIMIT_S; checked between iterations), the unconverged members marked ``timed_out`` in
    the second case. ``on_iteration(i)`` is called before Newton iteration i (progress; an
    exception it raises, e.g. a stop request, ends the solve). ``threads``: torch threads
    (default ``config.thread_count``). Each member iterates until it converges or stalls, the
    others go on without it: its iterates are those of its own solve, whatever the batch."""
    deadline = time.perf_counter() + (TIME_LIMIT_S if time_limit is None else time_limit)
    timed_out = False
    config = config.model_copy(update={"model": config.model.model_copy(update={"dtype": "float64"})})
    device = resolve_device(config.device)
    ens = build_ensemble(config, members).to(device)
    x = start_weights(config, members, starts or ["init"] * len(members), ens).to(device)  # (S, B, k, k)
    problem = _Problem(config, ens.train, ens.hyper["l2"])
    S = len(members)
    with training_threads(config.thread_count(S) if threads is None else threads):
        iters = torch.zeros(S, dtype=torch.long, device=device)
        stalls = torch.zeros(S, dtype=torch.long, device=device)
        residual, _ = certificate(problem, x)
        todo = ~(residual < SOLVE_TOL)
        active, sub = torch.arange(S, device=device), problem  # the members still iterating and their problem
        duals = torch.zeros(S, problem.live[0].numel(), dtype=x.dtype, device=device)  # (S, U N C) the hinges' last dual
        for iteration in range(MAX_ITER):
            if on_iteration is not None:
                on_iteration(iteration)
            if not bool(todo.any()):
                break
            if time.perf_counter() > deadline:
                timed_out = True
                break
            keep = torch.nonzero(todo).flatten()  # (S',)
            if not torch.equal(keep, active):  # a member finished: the rest iterate without it
                active, sub = keep, problem.take(keep)
            xs = x[active]  # (S', B, k, k)
            fwd = sub.forward(xs)
            value = sub.value(fwd, xs)
            step, duals[active] = _newton_step(sub, xs, fwd, _near_kinks(sub, fwd), duals[active])
            new_x = _line_search(sub, xs, step, value, torch.ones_like(active, dtype=torch.bool))
            size = (new_x - xs).abs().flatten(1).amax(-1) / xs.abs().flatten(1).amax(-1).clamp_min(1.0)
            x = x.index_copy(0, active, new_x)
            iters[active] += 1
            stalls[active] = torch.where(size < STEP_TOL, stalls[active] + 1, 0)
            residual[active] = certificate(sub, new_x)[0]
            todo[active] = ~(residual[active] < SOLVE_TOL) & (stalls[active] < STALL_ITER) & torch.isfinite(value)
        residual, zeros = certificate(problem, x)
        fwd = problem.forward(x)
        value = problem.value(fwd, x)
        weights = tuple(x.unbind(1))
        test = evaluate(weights, ens.test, ens.hyper["l2"], config.model.output, config.model.normalizer, config.data.d, "test")
        f1, f2 = branch_outputs(weights, ens.test, config.model.normalizer, config.data.d)
        margin = lambda f, mask: ((ens.test.target * f) * mask).sum(-1) / mask.sum(-1)  # noqa: E731  (S,)
        test["m_P"] = margin(f1, ens.test.kind != KINDS["q_only"])
        test["m_Q"] = margin(f2, ens.test.kind != KINDS["p_only"])
    converged = [bool(residual[i] < GRAD_TOL) and math.isfinite(float(value[i])) for i in range(S)]
    return [Solution(x[i].cpu(), float(value[i]), float(residual[i]), int(iters[i]), int(zeros[i]), converged[i],
                     {k: float(v[i]) for k, v in test.items()}, timed_out and not converged[i] and bool(todo[i]))
            for i in range(S)]
