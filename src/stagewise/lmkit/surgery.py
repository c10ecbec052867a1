"""Rank-reduction surgery on attention matrices, addressed by selectors
(:mod:`stagewise.lmkit.selectors`: e.g. ``blocks.1-6.attn.{qkv,o}``, ``blocks.1.attn.q.head.0``).

Rank reduction of a matrix W (m x n, r = min(m, n), SVD W = sum_i s_i u_i v_i^T, s descending)
to k = floor(p r) directions::

    keep="largest":   W_k = sum_{i < k} s_i u_i v_i^T        (best rank-k approximation, Eckart-Young)
    keep="smallest":  W_k = sum_{i >= r - k} s_i u_i v_i^T   (the k smallest directions)
    keep="random":    W_k = sum_{i in S} s_i u_i v_i^T       (S: k of the r indices, uniformly at random)

keep="random" is the control of the other two: the same operation (keep k of the matrix's own
singular directions) with the directions chosen without regard to their size. S is drawn
without replacement, independently for every target (every matrix, or every head), from a CPU
``torch.Generator`` seeded with ``seed`` (:func:`random_directions`); the same seed, selector
and model shapes give the same directions. E ||W_k||_F^2 = (k / r) ||W||_F^2.

Exact SVD runs in float64 and the result is cast back to the weight's dtype. A target whose
k equals r is not touched at all (so p = 1.0 leaves the model bit-identical). Biases are never
changed. Edits are in place on the model passed in: copy it first to keep the original.
:class:`RankReducer` snapshots the selected matrices once and applies several p (to copies)
with one SVD per projection.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import pandas as pd
import torch

from stagewise.errors import UserError
from stagewise.lmkit.adapters import AttentionAdapter, adapter_for
from stagewise.lmkit.selectors import Target, parse_selector

RANK_TOL = 1e-6
"""k = floor(p * r + RANK_TOL): p * r within this of an integer counts as that integer (0.7 * 10 -> 7)."""

KEEPS = ("largest", "smallest", "random")
METHODS = ("exact", "randomized")


# ---- rank reduction -------------------------------------------------------------------------
def kept_rank(p: float, r: int) -> int:
    """k = floor(p * r) with tolerance :data:`RANK_TOL` (p in (0, 1]).

    Example::

        kept_rank(0.7, 10), kept_rank(0.5, 3)      # (7, 1)
    """
    return min(r, math.floor(p * r + RANK_TOL))


def low_rank(a: torch.Tensor, k: int, keep: str = "largest", *, method: str = "exact", seed: int = 0,
             oversample: int = 10, n_iter: int = 4) -> torch.Tensor:
    """a (B, m, n) rebuilt from k singular directions per matrix, in float64.

    keep="random" draws the k directions of every matrix with a CPU generator seeded with
    ``seed`` (:func:`random_directions`; the same draw as :meth:`RankReducer.apply` on one group).
    "exact": torch.linalg.svd. "randomized" (keep="largest" only): Halko, Martinsson & Tropp
    (2011) range finder with l = min(k + oversample, m, n) Gaussian probes drawn from a CPU
    torch.Generator seeded with ``seed`` (same result on any device) and ``n_iter`` subspace
    iterations re-orthonormalized by QR, then the exact SVD of the small l x n projection.

    Example::

        w2 = low_rank(w[None], 2)[0]                # w (m, n) -> its best rank-2 approximation (float64)
    """
    a = a.to(torch.float64)  # (B, m, n)
    r = min(a.shape[-2:])
    if not 0 <= k <= r:
        raise ValueError(f"k must be in 0..{r} for {tuple(a.shape[-2:])} matrices, got {k}")
    if method == "randomized":
        if keep != "largest":
            raise UserError(f"method='randomized' only keeps the largest directions, got keep={keep!r}; use method='exact'")
        gen = torch.Generator().manual_seed(seed)
        width = min(k + oversample, r)
        probes = torch.randn(a.shape[0], a.shape[-1], width, generator=gen, dtype=torch.float64).to(a.device)  # (B, n, l)
        q = torch.linalg.qr(a @ probes).Q  # (B, m, l)
        for _ in range(n_iter):
            z = torch.linalg.qr(a.transpose(-1, -2) @ q).Q  # (B, n, l)
            q = torch.linalg.qr(a @ z).Q  # (B, m, l)
        ub, s, vh = torch.linalg.svd(q.transpose(-1, -2) @ a, full_matrices=False)  # (B, l, l), (B, l), (B, l, n)
        return _from_svd(q @ ub, s, vh, k, "largest")  # q @ ub: (B, m, l)
    u, s, vh = torch.linalg.svd(a, full_matrices=False)  # (B, m, r), (B, r), (B, r, n)
    if keep == "random":
        return _from_mask(u, s, vh, random_directions(a.shape[0], r, k, torch.Generator().manual_seed(seed)))
    return _from_svd(u, s, vh, k, keep)


def _from_svd(u: torch.Tensor, s: torch.Tensor, vh: torch.Tensor, k: int, keep: str) -> torch.Tensor:
    """sum of k of the directions u (B, m, l), s (B, l) descending, vh (B, l, n): the first k or the last k."""
    n = s.shape[-1]
    part = slice(0, k) if keep == "largest" else slice(n - k, n)
    return (u[..., part] * s[:, None, part]) @ vh[:, part, :]  # (B, m, n)


def random_directions(b: int, r: int, k: int, generator: torch.Generator) -> torch.Tensor:
    """(b, r) bool: for each of b matrices, k of its r direction indices chosen uniformly at
    random without replacement (the k smallest of r i.i.d. uniform scores: every k-subset is
    equally likely). Draws b * r numbers from ``generator`` (CPU).

    Example::

        random_directions(2, 5, 2, torch.Generator().manual_seed(0)).sum(1)   # tensor([2, 2])
    """
    scores = torch.rand(b, r, generator=generator, dtype=torch.float64)  # (b, r)
    ranks = scores.argsort(dim=1).argsort(dim=1)  # (b, r) rank of each score within its row
    return ranks < k  # (b, r)


def _from_mask(u: torch.Tensor, s: torch.Tensor, vh: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum of the directions where ``mask`` (B, l) is True: u (B, m, l), s (B, l), vh (B, l, n)."""
    kept = s * mask.to(device=s.device, dtype=s.dtype)  # (B, l) the dropped directions' s set to 0
    return (u * kept[:, None, :]) @ vh  # (B, m, n)


@dataclass(frozen=True)
class ReducedMatrix:
    """What happened to one target: shape, full rank r, kept k, the kept Frobenius fraction
    ``||W_k||_F / ||W||_F``, the relative error ``||W - W_k||_F / ||W||_F`` (both computed in
    float64 before the cast back; 1 and 0 for the zero matrix) and whether it was changed (k < r)."""

    name: str
    location: str
    shape: tuple[int, int]
    rank: int
    kept: int
    fro_kept: float
    rel_error: float
    changed: bool


@dataclass(frozen=True)
class Reduction:
    """Result of :func:`reduce_rank` / :meth:`RankReducer.apply`; ``items`` in target order, ``reduction[name]`` by name."""

    selector: str
    keep: str
    p: float
    method: str
    seed: int
    items: tuple[ReducedMatrix, ...]

    def __getitem__(self, name: str) -> ReducedMatrix:
        return {item.name: item for item in self.items}[name]  # KeyError for an unknown name

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(item.name for item in self.items)

    def table(self) -> pd.DataFrame:
        """One row per target (name, location, rows, cols, rank, kept, fro_kept, rel_error, changed)
        plus the reduction's selector, keep, p and method."""
        rows = [{"name": i.name, "location": i.location, "rows": i.shape[0], "cols": i.shape[1], "rank": i.rank,
                 "kept": i.kept, "fro_kept": i.fro_kept, "rel_error": i.rel_error, "changed": i.changed} for i in self.items]
        frame = pd.DataFrame(rows, columns=["name", "location", "rows", "cols", "rank", "kept", "fro_kept", "rel_error", "changed"])
        return frame.assign(selector=self.selector, keep=self.keep, p=self.p, method=self.method)


def check_reduce_args(keep, p, method="exact", oversample=10, n_iter=4) -> None:
    """One-line UserError unless the reduction arguments are allowed (before any work).

    Example::

        check_reduce_args("largest", 0.5)           # passes
        check_reduce_args("smallest", 0.5, "randomized")   # UserError: randomized keeps the largest only
    """
    if keep not in KEEPS:
        raise UserError(f"keep={keep!r} is not allowed; use one of {', '.join(KEEPS)}")
    if method not in METHODS:
        raise UserError(f"method={method!r} is not allowed; use one of {', '.join(METHODS)}")
    if method == "randomized" and keep != "largest":
        raise UserError(f"method='randomized' only keeps the largest directions, got keep={keep!r}; use method='exact'")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
        raise UserError(f"rank preservation p={p!r} is not allowed; use a number in (0, 1]")
    if int(oversample) != oversample or oversample < 0 or int(n_iter) != n_iter or n_iter < 0:
        raise UserError(f"oversample={oversample!r} and n_iter={n_iter!r} must be integers >= 0")


@dataclass(frozen=True, eq=False)
class _Group:
    """Targets of one projection, all whole or all single heads: one batched SVD."""

    proj: str
    whole: bool
    targets: tuple[Target, ...]
    original: torch.Tensor  # (B, m, n) float64 snapshot of the targets
    dtype: torch.dtype


class RankReducer:
    """The selected matrices of ``model``, snapshotted (float64) when built, ready to be reduced
    for several p without repeating the SVD (exact SVDs are computed once, when first needed).

    ``apply(target_model, ...)`` writes into ``target_model`` in place (the model it was built
    from or a copy of it); every call starts from the snapshot, so calls do not compound.
    Memory: the snapshot plus, once an exact reduction ran, its SVD factors (about 3x the
    selected weights in float64).

    Example::

        reducer = RankReducer(model, "blocks.1-6.attn.{qkv,o}")
        for p in (0.25, 0.5, 1.0):
            edited = copy.deepcopy(model)
            reducer.apply(edited, "largest", p)     # one SVD per projection, reused for every p
    """

    def __init__(self, model, selector: str, *, adapter: AttentionAdapter | None = None):
        self.adapter = adapter or adapter_for(model)
        self.selector = selector
        self.targets = parse_selector(selector, self.adapter)
        by_kind: dict[tuple[str, bool], list[Target]] = defaultdict(list)
        for t in self.targets:
            by_kind[(t.proj, t.head is None)].append(t)
        self._groups = []
        with torch.no_grad():
            for (proj, whole), members in by_kind.items():
                if whole:
                    mats = [self.adapter.matrix(model, t.layer, proj) for t in members]  # B x (m, n)
                else:
                    heads = {t.layer: self.adapter.heads(model, t.layer, proj) for t in members}  # layer -> (H, m, n)
                    mats = [heads[t.layer][t.head] for t in members]  # B x (m, n)
                self._groups.append(_Group(proj, whole, tuple(members), torch.stack(mats).to(torch.float64), mats[0].dtype))
        self._svd: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def _reduce(self, i: int, k: int, keep: str, method: str, seed: int, oversample: int, n_iter: int,
                generator: torch.Generator | None = None) -> torch.Tensor:
        original = self._groups[i].original  # (B, m, n)
        if method == "randomized":
            return low_rank(original, k, keep, method=method, seed=seed, oversample=oversample, n_iter=n_iter)
        if i not in self._svd:
            self._svd[i] = torch.linalg.svd(original, full_matrices=False)  # (B, m, r), (B, r), (B, r, n)
        if keep == "random":
            if generator is None:
                raise ValueError("keep='random' needs the apply call's generator")
            u, s, vh = self._svd[i]
            return _from_mask(u, s, vh, random_directions(s.shape[0], s.shape[1], k, generator))  # (B, m, n)
        return _from_svd(*self._svd[i], k, keep)  # (B, m, n)

    def apply(self, model, keep: str = "largest", p: float = 1.0, *, method: str = "exact", seed: int = 0,
              oversample: int = 10, n_iter: int = 4) -> Reduction:
        """Reduce every target of ``model`` (in place) to k = floor(p r) directions; see :func:`reduce_rank`.

        keep="random": one ``torch.Generator`` seeded with ``seed`` per call, drawn from group by
        group in the reducer's order (groups whose k equals r draw nothing), so a call's
        directions depend only on ``seed``, ``p`` and the selection."""
        check_reduce_args(keep, p, method, oversample, n_iter)
        a = self.adapter
        generator = torch.Generator().manual_seed(int(seed)) if keep == "random" else None
        done: dict[Target, ReducedMatrix] = {}
        for i, g in enumerate(self._groups):
            rows, cols = g.original.shape[-2:]
            shape = (rows, cols)
            r = min(shape)
            k = kept_rank(float(p), r)
            if k == r:  # not touched at all: p = 1 leaves the model bit-identical
                for t in g.targets:
                    done[t] = ReducedMatrix(t.name, a.location(t.layer, g.proj, t.head), shape, r, k, 1.0, 0.0, False)
                continue
            with torch.no_grad():
                new = self._reduce(i, k, keep, method, seed, int(oversample), int(n_iter), generator)  # (B, m, n) float64
                norm = torch.linalg.matrix_norm(g.original)  # (B,)
                safe = torch.where(norm > 0, norm, 1.0)  # (B,)
                kept_frac = torch.where(norm > 0, torch.linalg.matrix_norm(new) / safe, 1.0).tolist()
                err = torch.where(norm > 0, torch.linalg.matrix_norm(g.original - new) / safe, 0.0).tolist()
                new = new.to(g.dtype)  # (B, m, n)
                if g.whole:
                    for j, t in enumerate(g.targets):
                        a.set_matrix(model, t.layer, g.proj, new[j])
                else:
                    heads = {t.layer: a.heads(model, t.layer, g.proj) for t in g.targets}  # layer -> (H, m, n)
                    for j, t in enumerate(g.targets):
                        heads[t.layer][t.head] = new[j]
                    for layer, value in heads.items():
                        a.set_heads(model, layer, g.proj, value)
            for j, t in enumerate(g.targets):
                done[t] = ReducedMatrix(t.name, a.location(t.layer, g.proj, t.head), shape, r, k, kept_frac[j], err[j], True)
        return Reduction(self.selector, keep, float(p), method, seed, tuple(done[t] for t in self.targets))


def reduce_rank(model, selector: str, keep: str = "largest", p: float = 1.0, *, method: str = "exact",
                seed: int = 0, oversample: int = 10, n_iter: int = 4,
                adapter: AttentionAdapter | None = None) -> Reduction:
    """Replace every selected matrix or head of ``model`` (in place) by k = floor(p r) of its
    singular directions (see the module docstring); returns what was done.

    All selected matrices of one shape (one projection, whole or per head, across layers) go
    through one batched SVD. For several p on copies of one model use :class:`RankReducer`.

    Example::

        reduction = reduce_rank(model, "blocks.0.attn.{q,k}.head.1", keep="largest", p=0.25)
        reduction.table()[["name", "rank", "kept", "rel_error"]]
    """
    check_reduce_args(keep, p, method, oversample, n_iter)
    return RankReducer(model, selector, adapter=adapter).apply(model, keep, p, method=method, seed=seed,
                                                                oversample=oversample, n_iter=n_iter)
