"""In-context prompts of the disentangled-feature lab (spec sections 1-2).

Every token is x = [x1; x2] in R^{2d}: x1 carries the elementary feature P (linearly
separable with a margin), x2 the specialized feature Q (not linearly separable). A prompt is
L tokens with labels; the first L-1 are labelled context, the last is the query whose label
is the target. Tokens follow the Li-Wei-Ma mixture: P-only (x2 = 0) with probability p0,
Q-only (x1 = 0) with probability q0, both features otherwise.

Shapes: S ensemble members, N prompts per member, L tokens per prompt, d block dimension.

Randomness: member i draws from its own generator seeded by (seeds[i], split), so member i
of a batch equals a call with ``seeds=[seeds[i]]``. The geometry (w*, zeta1, zeta2) comes
from a third stream of the seed, shared by the train and test splits of that seed.

Memory: :func:`draw_member` draws the two (N, L, d) noise streams chunk of prompts by chunk
(:func:`prompt_chunks`) and hands each finished chunk of x1, x2 to a writer, which puts it
straight into its final buffer (the run dtype's Batch, or :class:`Prompts`); the sampler
itself holds O(CHUNK_ELEMENTS) floats beyond the (N, L) labels. The chunks draw the same
values as one call (torch's CPU normal sampler, see :data:`RNG_BLOCK`), so the values do not
depend on the chunking.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ...engine import SeedStreams
from ...errors import UserError

P_GEOMETRIES = ("margin",)
Q_GEOMETRIES = ("three-cluster", "xor")
W_STAR_KINDS = ("e1", "random")
LABEL_RULES = ("shared", "composite")
SPLIT_STREAMS = {"train": "data.train", "test": "data.test"}
# every named stream of a member's seed in this lab; the training streams (init, one
# sub-stream per weight matrix; update noise; minibatches) seed torch with 63-bit words
STREAMS = SeedStreams({"data.train": 1, "data.test": 2, "geometry": 3, "init": (110, 1), "noise": 102, "batch": 103,
                       "control": 104},
                      width={"init": 63, "noise": 63, "batch": 63, "control": 63})

KIND_BOTH, KIND_P_ONLY, KIND_Q_ONLY, KIND_P_FLIPPED = 0, 1, 2, 3  # p_flipped: both features, P carries -y
CHUNK_ELEMENTS = 1 << 21  # float64 values (16 MiB) of a noise stream drawn at once: bounds the sampler's temporaries
RNG_BLOCK = 16  # torch's CPU normal sampler transforms blocks of 16 uniforms and redraws the last 16 of a draw whose
# size is not a multiple of 16: draws of a multiple of 16 values each, the last one >= 16, equal one call of their sum


@dataclass(frozen=True)
class DataSpec:
    """The data model of one run (plain values; the config layer maps onto it)."""

    d: int = 30  # dimension of each block (x = [x1; x2] in R^{2d})
    prompt_len: int = 20  # L: L-1 labelled context tokens + 1 query token
    p_geometry: str = "margin"  # P linearly separable with margin gamma0
    q_geometry: str = "three-cluster"  # or "xor"; the lab config defaults to xor and always sets it
    p0: float = 0.2  # probability a token is P-only (x2 = 0)
    q0: float = 0.2  # probability a token is Q-only (x1 = 0); both otherwise
    gamma0: float = 1.0  # P margin scale
    p_noise: float | None = None  # P noise std; None -> 1/sqrt(d)
    q_noise: float = 0.05  # Q noise std
    zeta: float = 0.5  # ||zeta|| for the Q clusters
    w_star: str = "e1"  # "e1" (first basis vector) or "random" (a random unit vector per seed)
    q_centre: float = 0.0  # ||z||: a common Q centre z (orthogonal to zeta1, zeta2) added to every Q block
    label_rule: str = "shared"  # "shared": P and Q both encode y; "composite": P's sign disagrees with y w.p. p_flip
    p_flip: float = 0.0  # composite: probability that a token's P block carries -y (Q always carries y)
    q_noise_radius: float | None = None  # R / ||zeta|| with R = q_noise sqrt(d) (gate-noise regime); None -> q_noise

    @property
    def p_noise_std(self) -> float:
        """The P noise std in effect (1/sqrt(d) when ``p_noise`` is None)."""
        return 1.0 / math.sqrt(self.d) if self.p_noise is None else float(self.p_noise)

    @property
    def q_noise_std(self) -> float:
        """The Q noise std per coordinate in effect: q_noise_radius ||zeta|| / sqrt(d), or ``q_noise``."""
        return float(self.q_noise) if self.q_noise_radius is None else self.q_noise_radius * self.zeta / math.sqrt(self.d)


@dataclass(frozen=True)
class Prompts:
    """A batch of prompts for S ensemble members, N prompts each, L tokens, block dim d."""

    x1: torch.Tensor  # (S, N, L, d) P block of every token (query at position L-1)
    x2: torch.Tensor  # (S, N, L, d) Q block
    y: torch.Tensor  # (S, N, L) labels in {-1, +1}, dtype of x; y[..., L-1] is the target
    kind: torch.Tensor  # (S, N, L) long: 0 = both features, 1 = P-only, 2 = Q-only, 3 = both with P flipped (composite)
    w_star: torch.Tensor  # (S, d) unit vector of the P direction
    zeta: torch.Tensor  # (S, 2, d) Q cluster directions zeta1, zeta2 (zeta2 used by xor only)


def _is_real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def validate_spec(spec: DataSpec) -> None:
    """Raise UserError listing every problem of ``spec`` (one line each); None when valid."""
    problems: list[str] = []
    for key in ("p0", "q0", "p_flip"):
        value = getattr(spec, key)
        if not _is_real(value) or not 0.0 <= value <= 1.0:
            problems.append(f"data.{key}={value!r}: must be a probability in [0, 1]")
    if not any(m.startswith(('data.p0=', 'data.q0=')) for m in problems) and spec.p0 + spec.q0 > 1.0:
        problems.append(f"data.p0 + data.q0 = {spec.p0 + spec.q0:g}: must be <= 1 (the rest of the tokens carry both features)")
    if not _is_int(spec.prompt_len) or spec.prompt_len < 2:
        problems.append(f"data.prompt_len={spec.prompt_len!r}: must be an integer >= 2 (at least one context token and the query)")
    if not _is_int(spec.d) or spec.d < 1:
        problems.append(f"data.d={spec.d!r}: must be an integer >= 1")
    if spec.p_noise is not None and (not _is_real(spec.p_noise) or spec.p_noise < 0):
        problems.append(f"data.p_noise={spec.p_noise!r}: must be a finite number >= 0 (or null for 1/sqrt(d))")
    if not _is_real(spec.q_noise) or spec.q_noise < 0:
        problems.append(f"data.q_noise={spec.q_noise!r}: must be a finite number >= 0")
    if spec.q_noise_radius is not None:
        radius = spec.q_noise_radius
        if not _is_real(radius) or radius <= 0:
            problems.append(f"data.q_noise_radius={radius!r}: must be a finite number > 0 (or null to use data.q_noise)")
        elif _is_int(spec.d) and spec.d >= 1 and radius >= math.sqrt(spec.d):
            problems.append(f"data.q_noise_radius={radius!r}: must be < sqrt(d) = {math.sqrt(spec.d):.4g} at data.d={spec.d} "
                            "(the Q noise per coordinate, radius ||zeta|| / sqrt(d), must stay below ||zeta||)")
    for key in ("gamma0", "zeta"):
        value = getattr(spec, key)
        if not _is_real(value) or value <= 0:
            problems.append(f"data.{key}={value!r}: must be a finite number > 0")
    if not _is_real(spec.q_centre) or spec.q_centre < 0:
        problems.append(f"data.q_centre={spec.q_centre!r}: must be a finite number >= 0")
    elif spec.q_centre > 0 and _is_int(spec.d) and spec.d < 3:
        problems.append(f"data.q_centre={spec.q_centre!r} needs data.d >= 3 (z is orthogonal to zeta1, zeta2); got data.d={spec.d}")
    if spec.label_rule == "shared" and _is_real(spec.p_flip) and spec.p_flip > 0:
        problems.append(f"data.p_flip={spec.p_flip!r} needs data.label_rule='composite'")
    for key, allowed in (("p_geometry", P_GEOMETRIES), ("q_geometry", Q_GEOMETRIES), ("w_star", W_STAR_KINDS),
                         ("label_rule", LABEL_RULES)):
        value = getattr(spec, key)
        if value not in allowed:
            problems.append(f"data.{key}={value!r}: unknown; allowed: {', '.join(allowed)}")
    if spec.q_geometry == "xor" and _is_int(spec.d) and spec.d == 1:
        problems.append("data.q_geometry='xor' needs data.d >= 2 (two orthogonal cluster directions); got data.d=1")
    if problems:
        raise UserError(*problems)


def _geometry(spec: DataSpec, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """w* (d,), zeta (2, d) and the Q centre z (d,) of one seed, in float64.

    Both draws are made whatever the options, so zeta does not depend on ``spec.w_star``.
    For d = 1 only zeta1 exists; zeta2 is then 0 (xor is rejected by validation). z is drawn
    after them (so the other values do not depend on it), made orthogonal to zeta1, zeta2 by
    Gram-Schmidt and scaled to ``spec.q_centre`` (0: no centre).
    """
    gen = STREAMS.torch(seed, "geometry")
    d = spec.d
    w_draw = torch.randn(d, generator=gen, dtype=torch.float64)  # (d,)
    z_draw = torch.randn(d, 2, generator=gen, dtype=torch.float64)  # (d, 2)
    if spec.w_star == "e1":
        w_star = torch.zeros(d, dtype=torch.float64)
        w_star[0] = 1.0
    else:
        w_star = w_draw / w_draw.norm()
    zeta = torch.zeros(2, d, dtype=torch.float64)
    if d == 1:
        zeta[0, 0] = torch.sign(z_draw[0, 0])
    else:
        q, r = torch.linalg.qr(z_draw)  # q: (d, 2) orthonormal columns
        zeta = (q * torch.sign(torch.diagonal(r))).T  # (2, d), rows orthonormal
    centre = torch.zeros(d, dtype=torch.float64)
    if spec.q_centre > 0:
        c_draw = torch.randn(d, generator=gen, dtype=torch.float64)  # (d,)
        c_draw = c_draw - zeta.T @ (zeta @ c_draw)  # (d,) orthogonal to zeta1, zeta2
        centre = c_draw / c_draw.norm() * spec.q_centre
    return w_star, zeta * spec.zeta, centre


def geometry(spec: DataSpec, seeds: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The signal directions of each seed, float64: w* (S, d) and an orthonormal basis of
    span(zeta1, zeta2) (S, 2, d) (the directions the P and Q signals live in)."""
    parts = [_geometry(spec, s) for s in seeds]
    w_star = torch.stack([w for w, _, _ in parts])  # (S, d)
    zeta = torch.stack([z for _, z, _ in parts])  # (S, 2, d)
    return w_star, zeta / zeta.norm(dim=-1, keepdim=True).clamp_min(1e-300)


Writer = Callable[[int, int, torch.Tensor], None]
"""``write(a, b, block)``: store the float64 block (b - a, L, d) of prompts a..b-1 of one member."""


@dataclass(frozen=True)
class MemberDraw:
    """What one member's draw returns beside the blocks its writers received."""

    y: torch.Tensor  # (N, L) float64 labels in {-1, +1}; y[:, L-1] is the target
    kind: torch.Tensor  # (N, L) long token kinds (KIND_*)
    w_star: torch.Tensor  # (d,) float64
    zeta: torch.Tensor  # (2, d) float64, scaled to ||zeta||


def prompt_chunks(n: int, prompt_len: int, d: int, chunk_elements: int | None = None) -> list[tuple[int, int]]:
    """Prompt ranges [a, b) that split one (n, L, d) normal draw into calls that draw the same
    values: every range but the last holds a multiple of RNG_BLOCK values, the last at least
    RNG_BLOCK (or the whole draw), about ``chunk_elements`` (default :data:`CHUNK_ELEMENTS`) values each."""
    chunk_elements = CHUNK_ELEMENTS if chunk_elements is None else chunk_elements
    per = prompt_len * d
    unit = RNG_BLOCK // math.gcd(per, RNG_BLOCK)  # prompts per multiple of RNG_BLOCK values
    step = max(unit, chunk_elements // per // unit * unit)
    bounds = list(range(0, n, step)) + [n]
    if len(bounds) > 2 and (bounds[-1] - bounds[-2]) * per < RNG_BLOCK:  # a short tail joins the range before it
        del bounds[-2]
    return list(zip(bounds[:-1], bounds[1:]))


def _p_block(spec: DataSpec, xi: torch.Tensor, y: torch.Tensor, flip: torch.Tensor | None, kind: torch.Tensor,
             w_star: torch.Tensor) -> torch.Tensor:
    """x1 of a chunk from its P noise draw xi (c, L, d), in place: the noise kept on the positive
    side of the hyperplane orthogonal to w*, times the label P encodes, zero on Q-only tokens."""
    along = xi @ w_star  # (c, L)
    xi += (along.abs() - along).unsqueeze(-1) * w_star  # (c, L, d)
    p_sign = y if flip is None else torch.where(flip, -y, y)  # (c, L) the label P encodes (= y unless composite flips it)
    x1 = xi.add_(spec.gamma0 * w_star).mul_(p_sign.unsqueeze(-1))  # (c, L, d): p_sign (gamma0 w* + xi)
    return x1.mul_((kind != KIND_Q_ONLY).unsqueeze(-1).to(x1.dtype))


def _q_block(spec: DataSpec, noise: torch.Tensor, y: torch.Tensor, side: torch.Tensor, kind: torch.Tensor,
             zeta: torch.Tensor, q_centre: torch.Tensor) -> torch.Tensor:
    """x2 of a chunk from its Q noise draw (c, L, d): z + side * cluster centre + noise, zero on P-only tokens."""
    positive = (y > 0).unsqueeze(-1)  # (c, L, 1)
    if spec.q_geometry == "three-cluster":
        centre = torch.where(positive, torch.zeros_like(zeta[0]), zeta[0])  # (c, L, d)
    else:  # xor
        centre = torch.where(positive, zeta[0], zeta[1])  # (c, L, d)
    x2 = (q_centre + side.unsqueeze(-1) * centre).add_(noise)  # (c, L, d): z + cluster + noise
    return x2.mul_((kind != KIND_P_ONLY).unsqueeze(-1).to(x2.dtype))


def draw_member(spec: DataSpec, seed: int, n: int, stream: str, write_x1: Writer, write_x2: Writer,
                chunk_elements: int | None = None) -> MemberDraw:
    """One member's ``n`` prompts in float64, x1 and x2 handed to the writers chunk by chunk.

    Fixed draw order on the member's stream, independent of the options and of the chunking:
    y, u (N, L); the P noise xi (N, L, d); the cluster side (N, L); the Q noise (N, L, d); the
    composite flip (N, L), drawn last. P's sign needs the flip, so when ``spec.p_flip > 0`` the
    P noise is drawn a second time from the stream state saved before it (same values), after
    the flip; otherwise each chunk of x1 is finished as it is drawn. Peak memory: the (N, L)
    draws plus a few (chunk, L, d) temporaries.
    """
    w_star, zeta, q_centre = _geometry(spec, seed)
    gen = STREAMS.torch(seed, stream)
    L, d, f64 = spec.prompt_len, spec.d, torch.float64
    chunks = prompt_chunks(n, L, d, chunk_elements)
    y = torch.randint(0, 2, (n, L), generator=gen).to(f64) * 2 - 1  # (N, L)
    u = torch.rand(n, L, generator=gen, dtype=f64)  # (N, L)
    kind = torch.full((n, L), KIND_BOTH, dtype=torch.long)
    kind[u < spec.p0] = KIND_P_ONLY
    kind[(u >= spec.p0) & (u < spec.p0 + spec.q0)] = KIND_Q_ONLY
    composite = spec.p_flip > 0
    p_state = gen.get_state()
    for a, b in chunks:  # the P noise: finished now, or (composite) skipped and drawn again after the flip
        xi = torch.randn(b - a, L, d, generator=gen, dtype=f64).mul_(spec.p_noise_std)  # (c, L, d)
        if not composite:
            write_x1(a, b, _p_block(spec, xi, y[a:b], None, kind[a:b], w_star))
    side = torch.randint(0, 2, (n, L), generator=gen).to(f64) * 2 - 1  # (N, L) cluster sign
    for a, b in chunks:
        noise = torch.randn(b - a, L, d, generator=gen, dtype=f64).mul_(spec.q_noise_std)  # (c, L, d)
        write_x2(a, b, _q_block(spec, noise, y[a:b], side[a:b], kind[a:b], zeta, q_centre))
    flip = torch.rand(n, L, generator=gen, dtype=f64) < spec.p_flip  # (N, L) composite: P carries -y (drawn last)
    kind[(kind == KIND_BOTH) & flip] = KIND_P_FLIPPED  # composite: only Q tells these tokens' label
    if composite:
        gen.set_state(p_state)
        for a, b in chunks:
            xi = torch.randn(b - a, L, d, generator=gen, dtype=f64).mul_(spec.p_noise_std)  # (c, L, d)
            write_x1(a, b, _p_block(spec, xi, y[a:b], flip[a:b], kind[a:b], w_star))
    return MemberDraw(y, kind, w_star, zeta)


def check_sampling(spec: DataSpec, seeds: Sequence[int], n: int, split: str) -> None:
    """Raise UserError listing every problem of the spec, ``n``, ``seeds`` and ``split``."""
    problems: list[str] = []
    try:
        validate_spec(spec)
    except UserError as err:
        problems.extend(err.messages)
    if not _is_int(n) or n < 1:
        problems.append(f"n={n!r}: number of prompts must be an integer >= 1")
    if len(seeds) < 1:
        problems.append("seeds=[]: need at least one seed")
    if split not in SPLIT_STREAMS:
        problems.append(f"split={split!r}: unknown; allowed: {', '.join(SPLIT_STREAMS)}")
    if problems:
        raise UserError(*problems)


def sample_prompts(spec: DataSpec, seeds: Sequence[int], n: int, split: str,
                   dtype: torch.dtype = torch.float64, chunk_elements: int | None = None) -> Prompts:
    """Draw ``n`` prompts of ``spec.prompt_len`` tokens for every seed of the ensemble.

    Returns Prompts with x1, x2 (S, N, L, d), y, kind (S, N, L), w_star (S, d), zeta (S, 2, d)
    where S = len(seeds). Sampling is done in float64 and written chunk by chunk into the
    ``dtype`` outputs, so the values agree across dtypes up to rounding (and the float64 ones
    do not depend on ``chunk_elements``). Raises UserError on a bad spec, n, seeds or split.
    """
    check_sampling(spec, seeds, n, split)
    S, L, d = len(seeds), spec.prompt_len, spec.d
    x1 = torch.empty(S, n, L, d, dtype=dtype)  # (S, N, L, d)
    x2 = torch.empty(S, n, L, d, dtype=dtype)  # (S, N, L, d)
    draws = []
    for s, seed in enumerate(seeds):
        def put(out: torch.Tensor) -> Writer:
            def write(a: int, b: int, block: torch.Tensor) -> None:
                out[a:b].copy_(block)
            return write
        draws.append(draw_member(spec, seed, n, SPLIT_STREAMS[split], put(x1[s]), put(x2[s]), chunk_elements))
    return Prompts(
        x1=x1, x2=x2, y=torch.stack([m.y for m in draws]).to(dtype), kind=torch.stack([m.kind for m in draws]),
        w_star=torch.stack([m.w_star for m in draws]).to(dtype), zeta=torch.stack([m.zeta for m in draws]).to(dtype),
    )
