"""Rank-reduction surgery on attention matrices, addressed by selectors.

Selector grammar (the project's metric-name grammar; layers are 0-based indices of the HF
module list, ``transformer.h`` / ``model.layers``)::

    selectors := selector ("," selector)*            top-level commas join selectors
    selector  := "blocks." set ".attn" ["." projs ["." "head." set]]
    set       := "*" | item | "{" item ("," item)* "}"     item := N | N-M  (inclusive)
    projs     := P | "{" P ("," P)* "}"                    P in q, k, v, o, qkv

Examples: ``blocks.1.attn.q.head.0``, ``blocks.1-6.attn.{qkv,o}``, ``blocks.{0,3}.attn``,
``blocks.1-6.attn.{q,k}.head.0-3``. Without ``.head`` a projection means its whole matrix;
``blocks.L.attn`` alone means q, k, v and o, each whole. ``qkv`` is GPT-2's fused c_attn
(d_model x 3 d_model, truncated as one block as the paper's authors did); other families
have no fused matrix. For k and v on grouped-query models the head index is the K/V head
(0..n_kv_heads-1). Duplicate targets are merged; a whole matrix and some of its heads (or
qkv and q/k/v of one layer) in one selection are ambiguous and rejected.

Rank reduction of a matrix W (m x n, r = min(m, n), SVD W = sum_i s_i u_i v_i^T, s descending)
to k = floor(p r) directions::

    keep="largest":   W_k = sum_{i < k} s_i u_i v_i^T        (best rank-k approximation, Eckart-Young)
    keep="smallest":  W_k = sum_{i >= r - k} s_i u_i v_i^T   (the k smallest directions)

Exact SVD runs in float64 and the result is cast back to the weight's dtype. A target whose
k equals r is not touched at all (so p = 1.0 leaves the model bit-identical). Biases are never
changed. Edits are in place on the model passed in: copy it first to keep the original.
:class:`RankReducer` snapshots the selected matrices once and applies several p (to copies)
with one SVD per projection.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass

import pandas as pd
import torch

from stagewise.errors import UserError
from stagewise.labs.lm.adapters import FUSED, HEAD_PROJECTIONS, AttentionAdapter, adapter_for

RANK_TOL = 1e-6
"""k = floor(p * r + RANK_TOL): p * r within this of an integer counts as that integer (0.7 * 10 -> 7)."""

KEEPS = ("largest", "smallest")
METHODS = ("exact", "randomized")
_PROJ_ORDER = {p: i for i, p in enumerate((*HEAD_PROJECTIONS, FUSED))}
_COVERS = {"q": ("q",), "k": ("k",), "v": ("v",), "o": ("o",), FUSED: ("q", "k", "v")}
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(\S))")
_GRAMMAR = "blocks.L.attn[.P[.head.H]] with L, H an index N, a range N-M, * or {a,b-c}, P in q,k,v,o,qkv or {q,k}"


@dataclass(frozen=True)
class Target:
    """One matrix (head None) or one head of one layer's projection."""

    layer: int
    proj: str
    head: int | None = None

    @property
    def name(self) -> str:
        """``blocks.{layer}.attn.{proj}`` or ``blocks.{layer}.attn.{proj}.head.{head}``."""
        base = f"blocks.{self.layer}.attn.{self.proj}"
        return base if self.head is None else f"{base}.head.{self.head}"

    def sort_key(self) -> tuple[int, int, int]:
        return (self.layer, _PROJ_ORDER[self.proj], -1 if self.head is None else self.head)


# ---- parsing --------------------------------------------------------------------------------
class _Parser:
    """Recursive descent over one selectors string; errors name the string and the position."""

    def __init__(self, text: str):
        self.text = text
        self.tokens: list[tuple[str, int, int]] = []  # (text, position, kind: 1 number, 2 name, 3 other; 0 the end)
        for m in _TOKEN.finditer(text):
            kind = m.lastindex
            if kind is None:  # every match takes one of _TOKEN's three groups
                raise ValueError(f"selector {text!r}: no token at position {m.start()}")
            self.tokens.append((m.group(kind), m.start(kind), kind))
        self.tokens.append(("end of text", len(text), 0))
        self.i = 0

    def peek(self) -> str:
        return self.tokens[self.i][0] if self.tokens[self.i][2] else ""

    def fail(self, expected: str):
        tok, pos, kind = self.tokens[self.i]
        found = repr(tok) if kind else "the end"
        raise UserError(f"selector {self.text!r}: expected {expected} at position {pos}, found {found}; grammar: {_GRAMMAR}")

    def take(self, literal: str) -> None:
        if self.peek() != literal:
            self.fail(repr(literal))
        self.i += 1

    def number(self) -> int:
        tok, _, kind = self.tokens[self.i]
        if kind != 1:
            self.fail("a number")
        self.i += 1
        return int(tok)

    def name(self) -> str:
        tok, _, kind = self.tokens[self.i]
        if kind != 2:
            self.fail("a projection name")
        self.i += 1
        return tok

    def braced(self, item) -> list:
        """``item`` or ``{item, item, ...}``."""
        if self.peek() != "{":
            return [item()]
        self.i += 1
        out = [item()]
        while self.peek() == ",":
            self.i += 1
            out.append(item())
        if self.peek() != "}":
            self.fail("',' or '}'")
        self.i += 1
        return out

    def index_item(self, what: str) -> int | tuple[int, int]:
        """N, or N-M as an inclusive (N, M)."""
        start, lo = self.tokens[self.i][1], self.number()
        if self.peek() != "-":
            return lo
        self.i += 1
        hi = self.number()
        if hi < lo:
            raise UserError(f"selector {self.text!r}: {what} range {lo}-{hi} at position {start} matches nothing (write low-high)")
        return (lo, hi)

    def index_set(self, what: str) -> list[int | tuple[int, int]] | None:
        """None for ``*``; else a list of indices and inclusive ranges."""
        if self.peek() == "*":
            self.i += 1
            return None
        return self.braced(lambda: self.index_item(what))

    def selector(self) -> "_Selector":
        start = self.tokens[self.i][1]
        self.take("blocks")
        self.take(".")
        layers = self.index_set("layer")
        self.take(".")
        self.take("attn")
        projs, heads, per_head = None, None, False
        if self.peek() == ".":
            self.i += 1
            projs = self.braced(self.name)
            if self.peek() == ".":
                self.i += 1
                self.take("head")
                self.take(".")
                heads, per_head = self.index_set("head"), True
        if self.peek() not in (",", ""):
            self.fail("',' or the end")
        return _Selector(self.text[start:self.tokens[self.i][1]].strip(), layers, projs, per_head, heads)

    def parse(self) -> list["_Selector"]:
        if not self.text.strip():
            raise UserError(f"selector {self.text!r} is empty; expected e.g. blocks.1-6.attn.{{qkv,o}} ({_GRAMMAR})")
        out = [self.selector()]
        while self.peek() == ",":
            self.i += 1
            out.append(self.selector())
        return out


@dataclass(frozen=True)
class _Selector:
    """One parsed selector: index sets are None for ``*`` (or absent), else indices and ranges."""

    text: str
    layers: list | None
    projs: list[str] | None
    per_head: bool
    heads: list | None


def _expand(items, n: int, what: str, selector: str, allowed: str) -> list[int]:
    """Indices of an index set; ``allowed`` says what exists (e.g. "this gpt2 model has layers 0..11")."""
    if items is None:
        return list(range(n))
    out: list[int] = []
    for item in items:
        lo, hi = item if isinstance(item, tuple) else (item, item)
        if hi >= n:
            raise UserError(f"selector {selector!r}: {what} {hi if lo < n else lo} out of range; {allowed}")
        out.extend(range(lo, hi + 1))
    return out


def parse_selector(text: str, adapter: AttentionAdapter) -> tuple[Target, ...]:
    """Targets of a selectors string for one model, deduplicated and sorted (layer, proj, head)."""
    targets: set[Target] = set()
    family = adapter.family
    for sel in _Parser(text).parse():
        layers = _expand(sel.layers, adapter.n_layers, "layer", sel.text,
                         f"this {family} model has layers 0..{adapter.n_layers - 1}")
        for proj in sel.projs or HEAD_PROJECTIONS:
            if proj not in _PROJ_ORDER:
                raise UserError(f"selector {sel.text!r}: unknown projection {proj!r}; allowed: {', '.join(adapter.projections)}")
            if proj not in adapter.projections:
                raise UserError(f"selector {sel.text!r}: {proj} is GPT-2's fused c_attn; this {family} model has "
                                "separate projections, use {q,k,v}")
            if not sel.per_head:
                targets.update(Target(layer, proj) for layer in layers)
                continue
            if proj == FUSED:
                raise UserError(f"selector {sel.text!r}: {FUSED} has no heads; select heads of q, k or v, e.g. {{q,k,v}}.head.0")
            n = adapter.n_heads_of(proj)
            kind = "query heads" if proj in ("q", "o") else "K/V heads"
            heads = _expand(sel.heads, n, f"{proj} head", sel.text, f"this {family} model has {n} {kind} (0..{n - 1}) for {proj}")
            targets.update(Target(layer, proj, head) for layer in layers for head in heads)
    _check_overlaps(targets, text)
    return tuple(sorted(targets, key=Target.sort_key))


def _check_overlaps(targets: set[Target], text: str) -> None:
    """A whole matrix may not be selected together with another target touching it."""
    touching: dict[tuple[int, str], list[Target]] = defaultdict(list)
    for t in targets:
        for part in _COVERS[t.proj]:
            touching[(t.layer, part)].append(t)
    for (layer, part), ts in touching.items():
        whole = [t for t in ts if t.head is None]
        if whole and len(ts) > 1:
            a, b = sorted(ts, key=Target.sort_key)[:2]
            raise UserError(f"selector {text!r} is ambiguous: {a.name} and {b.name} both change blocks.{layer}.attn.{part}; "
                            "select each matrix once: whole, as part of qkv, or some of its heads")


# ---- rank reduction -------------------------------------------------------------------------
def kept_rank(p: float, r: int) -> int:
    """k = floor(p * r) with tolerance :data:`RANK_TOL` (p in (0, 1])."""
    return min(r, math.floor(p * r + RANK_TOL))


def low_rank(a: torch.Tensor, k: int, keep: str = "largest", *, method: str = "exact", seed: int = 0,
             oversample: int = 10, n_iter: int = 4) -> torch.Tensor:
    """a (B, m, n) rebuilt from k singular directions per matrix, in float64.

    "exact": torch.linalg.svd. "randomized" (keep="largest" only): Halko, Martinsson & Tropp
    (2011) range finder with l = min(k + oversample, m, n) Gaussian probes drawn from a CPU
    torch.Generator seeded with ``seed`` (same result on any device) and ``n_iter`` subspace
    iterations re-orthonormalized by QR, then the exact SVD of the small l x n projection.
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
    return _from_svd(u, s, vh, k, keep)


def _from_svd(u: torch.Tensor, s: torch.Tensor, vh: torch.Tensor, k: int, keep: str) -> torch.Tensor:
    """sum of k of the directions u (B, m, l), s (B, l) descending, vh (B, l, n): the first k or the last k."""
    n = s.shape[-1]
    part = slice(0, k) if keep == "largest" else slice(n - k, n)
    return (u[..., part] * s[:, None, part]) @ vh[:, part, :]  # (B, m, n)


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
        for item in self.items:
            if item.name == name:
                return item
        raise KeyError(name)

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
    """One-line UserError unless the reduction arguments are allowed (before any work)."""
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

    def _reduce(self, i: int, k: int, keep: str, method: str, seed: int, oversample: int, n_iter: int) -> torch.Tensor:
        original = self._groups[i].original  # (B, m, n)
        if method == "randomized":
            return low_rank(original, k, keep, method=method, seed=seed, oversample=oversample, n_iter=n_iter)
        if i not in self._svd:
            self._svd[i] = torch.linalg.svd(original, full_matrices=False)  # (B, m, r), (B, r), (B, r, n)
        return _from_svd(*self._svd[i], k, keep)  # (B, m, n)

    def apply(self, model, keep: str = "largest", p: float = 1.0, *, method: str = "exact", seed: int = 0,
              oversample: int = 10, n_iter: int = 4) -> Reduction:
        """Reduce every target of ``model`` (in place) to k = floor(p r) directions; see :func:`reduce_rank`."""
        check_reduce_args(keep, p, method, oversample, n_iter)
        a = self.adapter
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
                new = self._reduce(i, k, keep, method, seed, int(oversample), int(n_iter))  # (B, m, n) float64
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
    """
    check_reduce_args(keep, p, method, oversample, n_iter)
    return RankReducer(model, selector, adapter=adapter).apply(model, keep, p, method=method, seed=seed,
                                                                oversample=oversample, n_iter=n_iter)
