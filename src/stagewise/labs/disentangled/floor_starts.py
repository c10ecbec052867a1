"""The declared starts of the floors solver, how one floor is chosen among them, and what shows
them: the run tables ``floors`` and ``floor_starts`` (:class:`FloorTables`) and the report of
``stagewise floors`` (:class:`FloorsReport`; both re-exported by :mod:`.floors`, which solves).

The floor objective J (:mod:`.floors`) is non-convex: every ReLU gate is a kink, and a
semismooth Newton solve ends at a local optimum of the start it is given. A floor that is one
local optimum is not "what the model can attain", so each member's floor problem is solved
from several declared starts (``experiment.floor_starts``, all by default), each
deterministic from the member's seed, and the floor is the **lowest objective found**::

    init     the member's own initial weights (train.init_weights: the run's start; first, so a
             tie keeps the single-start floor)
    small    a fresh draw at the same scale: N(0, init_scale^2) i.i.d. per entry, stream
             "floor_small" of the seed (a second small start: the init draw's luck)
    aligned  the two-scalar reduction's weights (docs/disentangled.md 5a):
             W = b w* w*^T, V = a (u1 u1^T + u2 u2^T), (u1, u2) an orthonormal basis of
             span(zeta1, zeta2); full weights: blockdiag(W, V). b = m_P / kappa_P and
             a = m_Q / kappa_Q with the member's kappas MEASURED on its training prompts
             (kappa_P = mean |f^1| of W = w* w*^T over the P-bearing queries, kappa_Q = mean |f^2|
             of V = u1 u1^T + u2 u2^T over the Q-bearing ones: :func:`.theory.kappa_p`'s
             quantities without the family's assumptions) and (m_P, m_Q) the fixed point
             :func:`.theory.fixed_point` at those kappas, each at least MIN_MARGIN (a = 0 would put
             every Q gate on its kink). Measured kappas scale like the features squared and the
             fixed point's margins depend on kappa^2 / lambda only, so the start is scale-covariant
             like the problem (features x c, lambda x c^4: W / c^2). A branch whose kappa is 0
             (no such queries) starts at 0; with one kappa 0 (or no fixed point) the margins are UNIT_MARGIN
    large    a random direction at the optimum's scale: N(0, 1) i.i.d. per entry, stream
             "floor_large", rescaled to the aligned start's Frobenius norm (the reduced model's
             estimate of ||X*||), so its gates are set by noise, not signal, at the weight size
             the optimum has: the far side of the optimum from the two near-zero starts

Choice (:func:`choose`): among the converged starts (all starts with finite values when none
converged) the lowest J; a later start replaces an earlier one only when its J is lower by more
than TIE_REL |J| (round-off decides nothing: starts that reach one optimum keep the earlier).
The spread columns are taken over the same pool::

    J.spread = max J - min J,   K1.min, K1.max, K2.min, K2.max   (test K1 on P-bearing, K2 on Q-bearing)

Shapes: S problems (a member under one start), B weight matrices of k x k (block: W, V with
k = d; full: one with k = 2d).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from ...engine import SeedStreams
from . import theory
from .config import FLOOR_STARTS, Config
from .data import STREAMS
from .ensemble import Ensemble
from .floor_limits import GRAD_TOL
from .metrics import KINDS, block_matrices
from .model import Batch, branch_outputs
from .train import Member, init_weights

START_NAMES = FLOOR_STARTS
"""The declared starts in their tie-breaking order (``experiment.floor_starts`` takes a subset)."""
FLOOR_STREAMS = SeedStreams({**STREAMS.keys, "floor_small": (120, 1), "floor_large": (130, 1)}, width=STREAMS.width)
"""The lab's streams plus the starts' (one sub-stream per weight matrix); built over every stream of
the lab, so a key shared with any of them fails at import."""
UNIT_MARGIN = 1.0  # aligned start's margin of a branch when the other has no kappa (the fixed point needs both)
MIN_MARGIN = 0.1  # aligned start's margins at least this (the fixed point's m_Q* is 0.016 at the default)
TIE_REL = 1e-12  # a later start's J must be lower by more than this relative amount to be chosen
START_COLUMNS = ("seed", "variant", "control", "start", "J", "K1", "K2", "m_P", "m_Q", "grad_norm", "iterations", "kinks",
                 "converged", "reason")
"""The columns of table ``floor_starts`` (one row per member and start)."""


def aligned_scales(config: Config, members: list[Member], batch: Batch, w_star: torch.Tensor,
                   zeta_basis: torch.Tensor) -> torch.Tensor:
    """(S, 2): (b, a) of each member's aligned start W = b w* w*^T, V = a (u1 u1^T + u2 u2^T)
    (module docstring), from its training prompts ``batch`` (the members' own, S of them), w*
    (S, d) and the basis of span(zeta1, zeta2) (S, 2, d)."""
    directions = _directions(config, w_star, zeta_basis)  # (S, B, k, k) W = w* w*^T, V = u1 u1^T + u2 u2^T
    f1, f2 = branch_outputs(tuple(directions.unbind(1)), batch, config.model.normalizer, config.data.d)  # (S, N) each
    bears_p, bears_q = batch.kind != KINDS["q_only"], batch.kind != KINDS["p_only"]  # (S, N)
    kappa = lambda f, mask: ((f.abs() * mask).sum(-1) / mask.sum(-1).clamp_min(1)).tolist()  # noqa: E731  (S,)
    out = []
    for m, k_p, k_q in zip(members, kappa(f1, bears_p), kappa(f2, bears_q)):
        m_p = m_q = UNIT_MARGIN
        if k_p > 0 and k_q > 0:
            try:
                point = theory.fixed_point(k_p, k_q, m.p0, m.q0, m.l2, config.train.objective)
                m_p, m_q = point.m_p, point.m_q
            except ValueError:  # not seen (lambda > 0 here); a start is a guess, never a reason for a run to fail
                pass
        out.append((max(m_p, MIN_MARGIN) / k_p if k_p > 0 else 0.0, max(m_q, MIN_MARGIN) / k_q if k_q > 0 else 0.0))
    return torch.tensor(out, dtype=torch.float64)


def _directions(config: Config, w_star: torch.Tensor, zeta_basis: torch.Tensor, scales: torch.Tensor | None = None) -> torch.Tensor:
    """(S, B, k, k): W = b w* w*^T, V = a (u1 u1^T + u2 u2^T) (``scales`` (S, 2) = (b, a); None:
    1, 1), block-diagonal for full weights; float64 on the device of w*."""
    w_star, zeta_basis = w_star.to(torch.float64), zeta_basis.to(torch.float64)
    ones = torch.ones(w_star.shape[0], 2, dtype=torch.float64, device=w_star.device)
    scales = ones if scales is None else scales.to(w_star.device)
    w = scales[:, 0, None, None] * torch.einsum("si,sj->sij", w_star, w_star)  # (S, d, d)
    v = scales[:, 1, None, None] * torch.einsum("sri,srj->sij", zeta_basis, zeta_basis)  # (S, d, d)
    if config.model.weights == "full":
        return block_matrices((w, v), config.data.d)[2].unsqueeze(1)  # (S, 1, 2d, 2d)
    return torch.stack((w, v), 1)  # (S, 2, d, d)


def _draw(config: Config, member: Member, stream: str) -> torch.Tensor:
    """N(0, 1) i.i.d. weights (B, k, k) of ``member`` from ``stream``, one sub-stream per matrix."""
    d = config.data.d
    shapes = [(2 * d, 2 * d)] if config.model.weights == "full" else [(d, d), (d, d)]
    return torch.stack([torch.randn(shape, generator=FLOOR_STREAMS.torch(member.seed, stream, k), dtype=torch.float64)
                        for k, shape in enumerate(shapes)])


def start_weights(config: Config, members: list[Member], starts: Sequence[str], ens: Ensemble) -> torch.Tensor:
    """X0 (S, B, k, k), float64 on the CPU: member i's weights under start ``starts[i]`` (module
    docstring), from its seed and its data alone: ``ens`` (:func:`.ensemble.build_ensemble` of
    ``members``) gives the training prompts and the signal directions w*, span(zeta1, zeta2)."""
    unknown = sorted(set(starts) - set(START_NAMES))
    if unknown or len(starts) != len(members):
        raise ValueError(f"starts={list(starts)}: one per member ({len(members)}), each one of {', '.join(START_NAMES)}")
    out = torch.stack(init_weights(config, members, torch.float64), 1)  # (S, B, k, k): init
    assert ens.w_star is not None and ens.zeta_basis is not None  # set by build_ensemble
    aligned = torch.zeros_like(out)  # (S, B, k, k), computed only when a start needs it (a pass over the prompts)
    if {"aligned", "large"} & set(starts):
        scales = aligned_scales(config, members, ens.train, ens.w_star, ens.zeta_basis)  # (S, 2)
        aligned = _directions(config, ens.w_star, ens.zeta_basis, scales).cpu()
    for i, (member, start) in enumerate(zip(members, starts)):
        if start == "small":
            out[i] = config.model.init_scale * _draw(config, member, "floor_small")
        elif start == "aligned":
            out[i] = aligned[i]
        elif start == "large":
            draw = _draw(config, member, "floor_large")
            out[i] = draw * (aligned[i].norm() / draw.norm())
    return out


# --- the choice among starts, the tables ---------------------------------------------------------------------------
SPREAD_COLUMNS = ("start", "starts", "J.spread", "K1.min", "K1.max", "K2.min", "K2.max")
"""What table ``floors`` adds to the chosen start's columns (module docstring)."""


def _finite(row: dict[str, Any]) -> bool:
    """A start with a solution and finite values (objective and both test losses)."""
    return all(isinstance(row.get(k), float) and math.isfinite(row[k]) for k in ("J", "K1.all", "K2.all"))


def choose(rows: Sequence[dict[str, Any]]) -> tuple[int, list[int]]:
    """(the chosen start's index, the pool): the lowest J over the converged finite starts, or
    over every finite one when none converged (TIE_REL: the earlier start keeps a tie); (0, [])
    when no start has a finite solution."""
    finite = [i for i, r in enumerate(rows) if _finite(r)]
    pool = [i for i in finite if rows[i]["converged"]] or finite
    if not pool:
        return 0, []
    best = pool[0]
    for i in pool[1:]:
        if rows[i]["J"] < rows[best]["J"] - TIE_REL * abs(rows[best]["J"]):
            best = i
    return best, pool


def spread(rows: Sequence[dict[str, Any]], starts: Sequence[str], solved: int) -> tuple[int, dict[str, Any]]:
    """(the chosen index, the SPREAD_COLUMNS) of one member's start rows (row i: start
    ``starts[i]``; ``solved`` of them had a solve): the spread over :func:`choose`'s pool."""
    best, pool = choose(rows)
    values = lambda key: [rows[i][key] for i in pool if math.isfinite(rows[i][key])]  # noqa: E731
    lo_hi = lambda key: (min(values(key)), max(values(key))) if values(key) else (math.nan, math.nan)  # noqa: E731
    j, k1, k2 = lo_hi("J"), lo_hi("K1"), lo_hi("K2")
    return best, {"start": starts[best] if pool else "", "starts": solved, "J.spread": j[1] - j[0],
                  "K1.min": k1[0], "K1.max": k1[1], "K2.min": k2[0], "K2.max": k2[1]}


@dataclass(frozen=True)
class FloorTables:
    """The floors of a list of members: ``rows`` (table ``floors``, one per member: the chosen
    start's values and the spread over starts) and ``start_rows`` (table ``floor_starts``, one per
    member and start, members in order, each member's starts in the declared order)."""

    rows: list[dict[str, Any]]
    start_rows: list[dict[str, Any]]

    def frames(self, group: str, variants: list[str]) -> dict[str, pd.DataFrame]:
        """Both tables as frames of a run's group: column ``group`` first, ``variant`` the run
        store's name of each member (``variants``, one per row of ``rows``)."""
        per_member = len(self.start_rows) // max(1, len(self.rows))
        out = {}
        for name, rows, names in (("floors", self.rows, variants),
                                  ("floor_starts", self.start_rows, [v for v in variants for _ in range(per_member)])):
            frame = pd.DataFrame(rows)
            frame["variant"] = names
            frame.insert(0, "group", group)
            out[name] = frame
        return out


@dataclass(frozen=True)
class FloorsReport:
    """What ``stagewise floors`` prints: rows (:func:`.floor_tables.floor_rows`), seconds taken, a config note."""

    rows: list[dict[str, Any]]
    seconds: float
    note: str
    starts: str = ", ".join(START_NAMES)  # the declared starts solved (experiment.floor_starts)

    def text(self) -> list[str]:
        """The note, a header, one line per seed (numerical | analytic K1*, K2*, m_P*, m_Q* |
        certificate | the chosen start, the spread over starts: J max - min, K1*, K2* min..max),
        the means over seeds, the reasons, the time and the starts."""
        cols = ("K1", "K2", "m_P", "m_Q", "analytic.K1", "analytic.K2", "analytic.m_P", "analytic.m_Q")
        fmt = lambda v: f"{v:8.4f}" if isinstance(v, float) and math.isfinite(v) else f"{'-':>8}"  # noqa: E731
        span = lambda r, k: f"{fmt(r.get(f'{k}.min')).strip()}..{fmt(r.get(f'{k}.max')).strip()}"  # noqa: E731
        lines = [self.note, f"{'seed':>6} {'K1*':>8} {'K2*':>8} {'m_P*':>8} {'m_Q*':>8} | {'an. K1*':>8} {'an. K2*':>8} "
                            f"{'an. m_P*':>8} {'an. m_Q*':>8} | {'grad':>8} {'iter':>5} {'kinks':>5} conv | {'start':>7} "
                            f"{'J spread':>8} {'K1* over starts':>15} {'K2* over starts':>15}"]
        for r in self.rows:
            vals = [fmt(r[c]) for c in cols]
            spread_j = r.get("J.spread", math.nan)
            lines.append(f"{r['seed']:>6} {' '.join(vals[:4])} | {' '.join(vals[4:])} | {r['grad_norm']:8.1e} {r['iterations']:>5} "
                         f"{r['kinks']:>5} {'yes' if r['converged'] else ' no'} | {r.get('start') or '-':>7} "
                         f"{spread_j if math.isfinite(spread_j) else math.nan:8.1e} {span(r, 'K1'):>15} {span(r, 'K2'):>15}")
        means = [fmt(_mean([r[c] for r in self.rows])) for c in cols]
        lines.append(f"{'mean':>6} {' '.join(means[:4])} | {' '.join(means[4:])} |")
        lines += [f"note: {why}" for why in sorted({r[k] for r in self.rows for k in ("reason", "analytic.reason") if r[k]})]
        starts = max((r.get("starts", 1) for r in self.rows), default=1)
        lines.append(f"computed in {self.seconds:.2f} s without training: the noise-free L2 optimum of train.objective="
                     f"{self.rows[0]['objective']} on each seed's training prompts (max |generalised grad| < {GRAD_TOL:g}), "
                     f"lowest found over {starts} start{'s' if starts != 1 else ''} ({self.starts}); "
                     "K1* on P-bearing, K2* on Q-bearing test queries, nats")
        return lines


def _mean(values: list[float]) -> float:
    finite = [v for v in values if isinstance(v, float) and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan
