"""Spectra of square matrices batched over a leading ensemble axis.

Every function takes ``m`` of shape (S, n, n): one n x n matrix per ensemble member (seed),
except :func:`sv_stats`, which summarizes given singular values (B, r) of any matrices.
Work is done in float64 (float32 input is promoted), so results are float64 on ``m``'s
device. Metric names follow TransformerLens's self-describing style, e.g. ``W.sv.0``,
``W.eig_abs.1``, ``W.top2_share``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

_TIE_RTOL = 1e-9  # moduli within this relative gap count as equal when sorting eigenvalues


def _as_batch(m: torch.Tensor) -> torch.Tensor:
    """Validate (S, n, n) and return it as float64."""
    if not isinstance(m, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor of shape (S, n, n), got {type(m).__name__}")
    if m.ndim != 3 or m.shape[-1] != m.shape[-2]:
        raise ValueError(f"expected shape (S, n, n) (a batch of square matrices), got {tuple(m.shape)}")
    if m.is_complex():
        raise ValueError(f"expected a real matrix, got dtype {m.dtype}")
    return m.to(torch.float64)


def _check_k(k: int, n: int, keep: str) -> None:
    if not 0 <= k <= n:
        raise ValueError(f"k must be in 0..{n} for {n} x {n} matrices, got {k}")
    if keep not in ("top", "bottom"):
        raise ValueError(f"keep must be 'top' or 'bottom', got {keep!r}")


def _sorted_eigvals(m: torch.Tensor) -> torch.Tensor:
    """Complex eigenvalues (S, n) sorted by modulus desc, then real part desc, then imag desc.

    Moduli equal up to a relative 1e-9 (of the member's largest modulus) count as ties, so a
    conjugate pair or a +-lambda pair sorts deterministically: e^{+i t} before e^{-i t}.
    """
    eig = torch.linalg.eigvals(m)  # (S, n) complex
    mod = eig.abs()  # (S, n)
    scale = mod.amax(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)  # (S, 1)
    mod_key = torch.round(mod / (scale * _TIE_RTOL))  # (S, n) quantized modulus
    order = torch.arange(eig.shape[-1], device=eig.device).expand_as(mod)  # (S, n)
    # Stable sorts from least to most significant key give a lexicographic order.
    for key in (eig.imag, eig.real, mod_key):
        keyed = torch.gather(key, -1, order)  # (S, n)
        idx = torch.sort(keyed, dim=-1, descending=True, stable=True).indices  # (S, n)
        order = torch.gather(order, -1, idx)
    return torch.gather(eig, -1, order)  # (S, n)


@dataclass(frozen=True, eq=False)
class Spectrum:
    """Spectral summary of a batch of square matrices; every field has leading axis S.

    eig_real, eig_imag, eig_abs: (S, n) eigenvalues of m, sorted by modulus descending (ties
        by real part descending, then imaginary part descending).
    sym_eig: (S, n) eigenvalues of the symmetric part (m + m^T) / 2, descending.
    sv: (S, n) singular values, descending.
    fro, spectral_norm, stable_rank: (S,); stable_rank = fro^2 / spectral^2, 0 for m = 0.
    """

    eig_real: torch.Tensor
    eig_imag: torch.Tensor
    eig_abs: torch.Tensor
    sym_eig: torch.Tensor
    sv: torch.Tensor
    fro: torch.Tensor
    spectral_norm: torch.Tensor
    stable_rank: torch.Tensor

    def top_share(self, k: int) -> torch.Tensor:
        """(S,) share of squared singular mass in the top k: sum_{i<k} sv_i^2 / sum sv^2.

        0 for the zero matrix; k larger than n is clamped to n.
        """
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        power = self.sv**2  # (S, n)
        total = power.sum(dim=-1)  # (S,)
        top = power[:, :k].sum(dim=-1)  # (S,)
        return torch.where(total > 0, top / torch.where(total > 0, total, 1.0), 0.0)


def spectrum(m: torch.Tensor) -> Spectrum:
    """Eigenvalues, symmetric-part eigenvalues, singular values and norms of m (S, n, n)."""
    m = _as_batch(m)  # (S, n, n)
    eig = _sorted_eigvals(m)  # (S, n) complex
    sym = 0.5 * (m + m.transpose(-1, -2))  # (S, n, n)
    sym_eig = torch.linalg.eigvalsh(sym).flip(-1)  # (S, n) descending
    sv = torch.linalg.svdvals(m)  # (S, n) descending
    fro = torch.sqrt((sv**2).sum(dim=-1))  # (S,)
    spectral = sv[:, 0]  # (S,)
    safe = torch.where(spectral > 0, spectral, 1.0)  # (S,)
    stable_rank = torch.where(spectral > 0, fro**2 / safe**2, 0.0)  # (S,)
    return Spectrum(
        eig_real=eig.real.contiguous(),
        eig_imag=eig.imag.contiguous(),
        eig_abs=eig.abs(),
        sym_eig=sym_eig,
        sv=sv,
        fro=fro,
        spectral_norm=spectral,
        stable_rank=stable_rank,
    )


def spectrum_metrics(name: str, m: torch.Tensor, k: int | None = None) -> dict[str, torch.Tensor]:
    """Flat {metric name: (S,) tensor} for logging the spectrum of m (S, n, n).

    Names: ``{name}.fro``, ``{name}.spectral``, ``{name}.stable_rank``, ``{name}.top{k}_share``
    (only when k is given), and for i in 0..n-1: ``{name}.sv.{i}``, ``{name}.eig_abs.{i}``,
    ``{name}.eig_real.{i}``, ``{name}.eig_imag.{i}``, ``{name}.sym_eig.{i}``.
    """
    spec = spectrum(m)
    out: dict[str, torch.Tensor] = {
        f"{name}.fro": spec.fro,
        f"{name}.spectral": spec.spectral_norm,
        f"{name}.stable_rank": spec.stable_rank,
    }
    if k is not None:
        out[f"{name}.top{k}_share"] = spec.top_share(k)
    fields = ("sv", "eig_abs", "eig_real", "eig_imag", "sym_eig")
    for field in fields:
        values = getattr(spec, field)  # (S, n)
        for i in range(values.shape[-1]):
            out[f"{name}.{field}.{i}"] = values[:, i]
    return out


def truncate(m: torch.Tensor, k: int, keep: str = "top") -> torch.Tensor:
    """m (S, n, n) rebuilt from k singular directions: the largest (keep="top") or smallest.

    truncate(m, k, "top") + truncate(m, n - k, "bottom") == m; k = 0 gives zeros, k = n gives m.
    """
    m = _as_batch(m)  # (S, n, n)
    _check_k(k, m.shape[-1], keep)
    return truncate_svd(torch.linalg.svd(m), k, keep)


def truncate_svd(svd: tuple[torch.Tensor, torch.Tensor, torch.Tensor], k: int, keep: str = "top") -> torch.Tensor:
    """:func:`truncate` from a precomputed ``torch.linalg.svd(m)`` = (u, s, vh) of shapes
    (S, n, n), (S, n), (S, n, n): one SVD for many k (same values as :func:`truncate`)."""
    u, s, vh = svd  # (S, n, n), (S, n), (S, n, n); s descending
    n = s.shape[-1]
    _check_k(k, n, keep)
    part = slice(0, k) if keep == "top" else slice(n - k, n)
    u_k, s_k, vh_k = u[:, :, part], s[:, part], vh[:, part, :]  # (S, n, k), (S, k), (S, k, n)
    return (u_k * s_k.unsqueeze(-2)) @ vh_k  # (S, n, n)


def truncate_eig(m: torch.Tensor, k: int, keep: str = "top") -> torch.Tensor:
    """Symmetric part of m (S, n, n) rebuilt from k eigen-directions.

    m is first symmetrized, (m + m^T) / 2, so for a non-symmetric m the antisymmetric part is
    dropped. keep="top" keeps the k largest eigenvalues (signed, not by modulus), "bottom" the
    k smallest; top-k + bottom-(n - k) == (m + m^T) / 2.
    """
    m = _as_batch(m)  # (S, n, n)
    n = m.shape[-1]
    _check_k(k, n, keep)
    sym = 0.5 * (m + m.transpose(-1, -2))  # (S, n, n)
    evals, evecs = torch.linalg.eigh(sym)  # (S, n) ascending, (S, n, n) columns
    part = slice(n - k, n) if keep == "top" else slice(0, k)
    q, lam = evecs[:, :, part], evals[:, part]  # (S, n, k), (S, k)
    return (q * lam.unsqueeze(-2)) @ q.transpose(-1, -2)  # (S, n, n)


SV_STATS = ("sv_max", "sv_top_share", "stable_rank", "effective_rank")
"""Names of the statistics :func:`sv_stats` returns."""


def sv_stats(sv: torch.Tensor, k: int) -> dict[str, torch.Tensor]:
    """Summary statistics of B lists of singular values sv (B, r) (nonnegative, any order).

    With s sorted descending, per row (each (B,), in sv's dtype):

    * ``sv_max`` = s_0 (the spectral norm).
    * ``sv_top_share`` = sum_{i<k} s_i^2 / sum_i s_i^2 (k > r counts as r).
    * ``stable_rank`` = ||W||_F^2 / ||W||_2^2 = sum_i s_i^2 / s_0^2.
    * ``effective_rank`` (Roy & Vetterli 2007) = exp(-sum_i p_i log p_i), p_i = s_i / sum_j s_j,
      with 0 log 0 = 0: 1 for rank one, r for r equal singular values.

    Every statistic is 0 for an all-zero row.
    """
    if not isinstance(sv, torch.Tensor) or sv.ndim != 2:
        raise ValueError(f"expected singular values of shape (B, r), got {getattr(sv, 'shape', type(sv).__name__)}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    s = torch.sort(sv, dim=-1, descending=True).values  # (B, r)
    power = s**2  # (B, r)
    total = power.sum(dim=-1)  # (B,)
    top = s[:, 0] if s.shape[-1] else torch.zeros_like(total)  # (B,)
    nonzero = total > 0  # (B,)
    safe_total = torch.where(nonzero, total, 1.0)  # (B,)
    safe_top = torch.where(nonzero, top, 1.0)  # (B,)
    l1 = s.sum(dim=-1, keepdim=True)  # (B, 1)
    p = s / torch.where(l1 > 0, l1, 1.0)  # (B, r)
    entropy = -torch.special.xlogy(p, p).sum(dim=-1)  # (B,)
    zero = torch.zeros_like(total)  # (B,)
    return {
        "sv_max": top,
        "sv_top_share": torch.where(nonzero, power[:, :k].sum(dim=-1) / safe_total, zero),
        "stable_rank": torch.where(nonzero, total / safe_top**2, zero),
        "effective_rank": torch.where(nonzero, torch.exp(entropy), zero),
    }
