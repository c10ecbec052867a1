"""Singular values of every attention head's weights, for logging during training.

For every layer l and query head h (in the "x @ W" convention of :mod:`.adapters`)::

    q:  svdvals W_Q[l, h]   (d_model, d_head)      k, v: per K/V head on grouped-query models
    o:  svdvals W_O[l, h]   (d_head, d_model)
    qk: svdvals W_Q[l, h] W_K[l, kv(h)]^T          (d_model, d_model), rank <= d_head

qk is computed factored and never formed: with reduced QR factorizations W_Q = Q_q R_q and
W_K = Q_k R_k, W_Q W_K^T = Q_q (R_q R_k^T) Q_k^T and Q_q, Q_k have orthonormal columns, so its
nonzero singular values are those of the d_head x d_head matrix R_q R_k^T. It is the unscaled
bilinear form of the attention scores: no 1/sqrt(d_head), no biases, no layer-norm gains, and
on rotary models no position-dependent rotation between the two factors (Llama-style: all of a
head's dims; GPT-NeoX: its first ``rotary_pct`` share, the rest pass through), i.e. the scores'
form at relative position 0. Every family gives the same per-head W_Q, W_K (:mod:`.adapters`),
so GPT-2, Llama-style and GPT-NeoX (Pythia) models go through the same code.

Everything is batched: all layers and heads of one projection are stacked to
(L * H, rows, cols) and go through one float64 QR call; the singular values of each head are
those of its d_head x d_head R factor (one small ``svdvals`` call per projection), and the R
factors of q and k give qk.
Metric names: ``blocks.{l}.attn.head.{h}.{proj}.{stat}`` with proj in q, k, v, o, qk and stat
one of :data:`stagewise.measure.spectra.SV_STATS` (sv_max, sv_top_share with k = top_k,
stable_rank, effective_rank; defined in :func:`stagewise.measure.spectra.sv_stats`). For k
and v, h is the K/V head index, as in the surgery selectors.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np
import pandas as pd
import torch

from stagewise.errors import UserError
from stagewise.lmkit.adapters import AttentionAdapter, adapter_for
from stagewise.measure.spectra import SV_STATS, sv_stats

DEFAULT_TOP_K = 4
"""Default k of ``sv_top_share``: the share of the squared singular mass in the top 4 directions."""

SPECTRA_PROJECTIONS = ("q", "k", "v", "o", "qk")
TABLE_COLUMNS = ("layer", "head", "proj", "index", "value")


def _r_factor(w: torch.Tensor) -> torch.Tensor:
    """R (B, r, c) of the reduced QR of w (B, rows, c), r = min(rows, c): same singular values as w."""
    return torch.linalg.qr(w.to(torch.float64), mode="r").R  # (B, r, c)


def qk_singular_values(w_q: torch.Tensor, w_k: torch.Tensor) -> torch.Tensor:
    """Singular values (B, min(d_model, d_head)) of W_Q W_K^T from w_q, w_k (B, d_model, d_head),
    descending, without forming the (B, d_model, d_model) product (float64).

    Example::

        sv = qk_singular_values(w_q, w_k)           # w_q, w_k (B, d_model, d_head) -> (B, d_head)
    """
    return torch.linalg.svdvals(_r_factor(w_q) @ _r_factor(w_k).transpose(-1, -2))  # (B, r)


@dataclass(frozen=True, eq=False)
class AttentionSpectra:
    """Spectra of one model's attention weights.

    Attributes:
        sv: proj -> (L, H_proj, r) float64 singular values, descending (H_proj = n_kv_heads for
            k and v, n_heads for q, o and qk).
        top_k: the k of ``sv_top_share``.
        metrics: metric name -> 0-d float64 CPU tensor (see the module docstring).
        table: long frame of every singular value, columns layer, head, proj, index, value.
    """

    sv: dict[str, torch.Tensor]
    top_k: int
    metrics: dict[str, torch.Tensor]
    table: pd.DataFrame


def head_singular_values(adapter: AttentionAdapter, model) -> dict[str, torch.Tensor]:
    """proj -> (L, H_proj, r) float64 singular values of every head (see :class:`AttentionSpectra`).

    Each head goes through one QR (W_O transposed to (d_model, d_head)); the singular values of
    W are those of its small R factor, and R_q, R_k are reused for qk.

    Example::

        sv = head_singular_values(adapter_for(model), model)
        sv["q"].shape, sv["qk"].shape               # (L, H, d_head) each
    """
    n_layers = adapter.n_layers
    with torch.no_grad():
        r = {}
        for proj in ("q", "k", "v", "o"):
            w = adapter.stacked_heads(model, proj).flatten(0, 1)  # (L * H_p, ., .)
            r[proj] = _r_factor(w.transpose(-1, -2) if proj == "o" else w)  # (L * H_p, r, d_head)
        out = {p: torch.linalg.svdvals(rp).reshape(n_layers, -1, rp.shape[-2]) for p, rp in r.items()}  # (L, H_p, r)
        kv = adapter.kv_head_of.to(r["k"].device)  # (H,)
        r_k = r["k"].unflatten(0, (n_layers, adapter.n_kv_heads))[:, kv].flatten(0, 1)  # (L * H, r, d_head)
        qk = torch.linalg.svdvals(r["q"] @ r_k.transpose(-1, -2))  # (L * H, r)
        out["qk"] = qk.reshape(n_layers, adapter.n_heads, -1)  # (L, H, r)
    return {p: out[p] for p in SPECTRA_PROJECTIONS}


@lru_cache(maxsize=32)
def _metric_names(proj: str, n_layers: int, n_heads: int) -> tuple[str, ...]:
    """Names in (layer, head, stat) row-major order."""
    return tuple(f"blocks.{layer}.attn.head.{head}.{proj}.{stat}"
                 for layer in range(n_layers) for head in range(n_heads) for stat in SV_STATS)


def spectra_table(sv: dict[str, torch.Tensor]) -> pd.DataFrame:
    """Long frame (layer, head, proj, index, value) of singular values proj -> (L, H, r).

    Example::

        table = spectra_table(head_singular_values(adapter_for(model), model))
        table.query("proj == 'qk' and index == 0")  # the top singular value of every head's W_Q W_K^T
    """
    parts = []
    for proj, values in sv.items():
        arr = values.detach().cpu().numpy()  # (L, H, r)
        layer, head, index = np.indices(arr.shape).reshape(3, -1)  # 3 x (L * H * r,)
        parts.append(pd.DataFrame({"layer": layer, "head": head, "proj": proj, "index": index, "value": arr.reshape(-1)}))
    if not parts:
        return pd.DataFrame({c: [] for c in TABLE_COLUMNS})
    return pd.concat(parts, ignore_index=True)


def attention_spectra(adapter: AttentionAdapter, model, top_k: int = DEFAULT_TOP_K) -> AttentionSpectra:
    """Singular values, summary metrics and the long table of every head's W_Q, W_K, W_V, W_O and W_Q W_K^T.

    Example::

        spectra = attention_spectra(adapter_for(model), model, top_k=4)
        spectra.metrics["blocks.0.attn.head.1.qk.stable_rank"]   # 0-d float64 tensor
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise UserError(f"spectra top_k={top_k!r} is not allowed; use an integer >= 1")
    sv = head_singular_values(adapter, model)
    metrics: dict[str, torch.Tensor] = {}
    for proj, values in sv.items():
        n_layers, n_heads, _ = values.shape
        stats = sv_stats(values.flatten(0, 1), top_k)  # stat -> (L * H,)
        flat = torch.stack([stats[s] for s in SV_STATS], dim=-1).reshape(-1).cpu()  # (L * H * n_stats,)
        metrics.update(zip(_metric_names(proj, n_layers, n_heads), flat.unbind(0)))
    return AttentionSpectra(sv, top_k, metrics, spectra_table(sv))


def spectra_hook(model, top_k: int = DEFAULT_TOP_K) -> Callable[[object], tuple[dict[str, torch.Tensor], pd.DataFrame]]:
    """A callable model -> (metrics, table) for the training loop; the adapter is chosen once.

    Example::

        hook = spectra_hook(model)
        metrics, table = hook(model)                # e.g. every k optimizer steps
    """
    adapter = adapter_for(model)

    def hook(m) -> tuple[dict[str, torch.Tensor], pd.DataFrame]:
        result = attention_spectra(adapter, m, top_k)
        return result.metrics, result.table

    return hook
