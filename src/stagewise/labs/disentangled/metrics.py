"""Metrics of the disentangled lab (spec section 3), per member, shape (S,) each.

Names: ``{split}.{quantity}`` with split in train/test, e.g. ``test.acc.q_only``,
``train.K1``, ``test.loss.label_neg``; weight norms ``W.fro``; spectra ``W.sv.3`` etc.
(see :func:`stagewise.measure.spectrum_metrics`). K1 / K2 are the logistic losses of the P
part / Q part of the output alone (f^1, f^2); ``_l2`` adds that block's L2 term.
"""

from __future__ import annotations

import torch

from ...measure import spectrum_metrics
from .model import Batch, all_scores, branch_outputs, forward, logistic

KINDS = {"both": 0, "p_only": 1, "q_only": 2}
P_FLIPPED = 3  # composite labels: both features, P carries -y (data.KIND_P_FLIPPED)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over prompts where mask holds: (S, N) -> (S,); NaN where no prompt qualifies."""
    mask = mask.to(values.dtype)
    return (values * mask).sum(-1) / mask.sum(-1)


def _sign_score(f: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """1 where sign(f) = y, 1/2 where f = 0 (a tie), 0 otherwise: (S, N)."""
    return 0.5 * (1.0 + torch.sign(f) * target)


def block_matrices(weights: tuple[torch.Tensor, ...], d: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(W, V, blockdiag(W, V)) of block weights, or the P-P block, Q-Q block and the whole
    matrix of full weights; (S, d, d), (S, d, d), (S, 2d, 2d)."""
    if len(weights) == 1:
        full = weights[0]
        return full[:, :d, :d], full[:, d:, d:], full
    w, v = weights
    whole = torch.zeros(w.shape[0], 2 * d, 2 * d, dtype=w.dtype, device=w.device)
    whole[:, :d, :d], whole[:, d:, d:] = w, v
    return w, v, whole


def evaluate(weights: tuple[torch.Tensor, ...], batch: Batch, l2: torch.Tensor, output: str, normalizer: str,
             d: int, split: str) -> dict[str, torch.Tensor]:
    """Losses and accuracies of one split, overall, by query kind and by label."""
    scores = all_scores(weights, batch)  # (S, B, N, C): one contraction for the output and both parts
    fwd = forward(weights, batch, output, normalizer, scores)
    loss = logistic(fwd.f, batch.target)  # (S, N)
    correct = (torch.sign(fwd.f) == batch.target).to(loss.dtype)  # f = 0 counts as wrong
    f1, f2 = branch_outputs(weights, batch, normalizer, d, scores if len(weights) == 2 else None)
    w, v, _ = block_matrices(weights, d)
    half_l2 = 0.5 * l2
    sq = [m.pow(2).flatten(1).sum(-1) for m in weights]
    part1, part2 = logistic(f1, batch.target), logistic(f2, batch.target)  # (S, N)
    k1, k2 = part1.mean(-1), part2.mean(-1)
    out = {
        f"{split}.loss": loss.mean(-1),
        f"{split}.loss_l2": loss.mean(-1) + half_l2 * sum(sq),
        f"{split}.acc": correct.mean(-1),
        f"{split}.K1": k1,
        f"{split}.K2": k2,
        f"{split}.K1_l2": k1 + half_l2 * w.pow(2).flatten(1).sum(-1),
        f"{split}.K2_l2": k2 + half_l2 * v.pow(2).flatten(1).sum(-1),
        # without the queries that carry no such feature (their branch output is 0: loss log 2)
        f"{split}.K1.p_queries": _masked_mean(part1, batch.kind != KINDS["q_only"]),
        f"{split}.K2.q_queries": _masked_mean(part2, batch.kind != KINDS["p_only"]),
        # the sign of one part alone on the queries carrying that feature; f^b = 0 (every ReLU
        # of the branch off: the part says nothing) scores 1/2, chance, not "wrong"
        f"{split}.acc.p_part": _masked_mean(_sign_score(f1, batch.target), batch.kind != KINDS["q_only"]),
        f"{split}.acc.q_part": _masked_mean(_sign_score(f2, batch.target), batch.kind != KINDS["p_only"]),
    }
    if bool((batch.kind == P_FLIPPED).any()):  # composite labels: the queries only Q can decide
        mask = batch.kind == P_FLIPPED
        out[f"{split}.acc.p_flipped"] = _masked_mean(correct, mask)
        out[f"{split}.loss.p_flipped"] = _masked_mean(loss, mask)
    for name, code in KINDS.items():
        mask = batch.kind == code
        out[f"{split}.acc.{name}"] = _masked_mean(correct, mask)
        out[f"{split}.loss.{name}"] = _masked_mean(loss, mask)
    for name, sign in (("label_pos", 1.0), ("label_neg", -1.0)):
        mask = batch.target == sign
        out[f"{split}.acc.{name}"] = _masked_mean(correct, mask)
        out[f"{split}.loss.{name}"] = _masked_mean(loss, mask)
        out[f"{split}.acc.q_only.{name}"] = _masked_mean(correct, mask & (batch.kind == KINDS["q_only"]))
    return out


def signal_metrics(w: torch.Tensor, v: torch.Tensor, w_star: torch.Tensor, zeta_basis: torch.Tensor) -> dict[str, torch.Tensor]:
    """The signal parts of the weights, (S,) each: the P signal a = w*^T W w* (W projected on
    w* w*^T), the singular values of the Q signal Z^T V Z (V projected on span zeta, Z the
    (d, 2) orthonormal basis), and the share of ||.||_F^2 each signal part holds.

    w, v (S, d, d); w_star (S, d); zeta_basis (S, 2, d). What is not signal is what the
    noise (update noise, minibatches, init) put there."""
    a = torch.einsum("md,mde,me->m", w_star, w, w_star)  # (S,)
    core = torch.einsum("mid,mde,mje->mij", zeta_basis, v, zeta_basis)  # (S, 2, 2) Z^T V Z
    sv = torch.linalg.svdvals(core)  # (S, 2), descending
    w_sq, v_sq = w.pow(2).flatten(1).sum(-1), v.pow(2).flatten(1).sum(-1)
    tiny = torch.finfo(w.dtype).tiny
    return {"W.signal": a, "W.signal_share": a.pow(2) / w_sq.clamp_min(tiny),
            "V.signal.sv.0": sv[:, 0], "V.signal.sv.1": sv[:, 1],
            "V.signal_share": core.pow(2).flatten(1).sum(-1) / v_sq.clamp_min(tiny)}


def weight_metrics(weights: tuple[torch.Tensor, ...], d: int, spectra: bool, w_star: torch.Tensor | None = None,
                   zeta_basis: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Norms (always) and full spectra (when ``spectra``) of W, V and blockdiag(W, V) ("WV");
    the signal parts (:func:`signal_metrics`) when the geometry is given."""
    w, v, whole = block_matrices(weights, d)
    if w_star is not None and zeta_basis is None:
        raise ValueError("weight_metrics: w_star given without zeta_basis (the signal parts need both)")
    out = signal_metrics(w, v, w_star, zeta_basis) if w_star is not None and zeta_basis is not None else {}
    for name, m in (("W", w), ("V", v), ("WV", whole)):
        if spectra:
            out.update(spectrum_metrics(name, m, k=max(1, m.shape[-1] // 4)))
        elif name == "WV" and len(weights) == 2:  # blockdiag(W, V): its norms follow from the blocks'
            out["WV.fro"] = (out["W.fro"].pow(2) + out["V.fro"].pow(2)).sqrt()
            out["WV.spectral"] = torch.maximum(out["W.spectral"], out["V.spectral"])
        else:
            out[f"{name}.fro"] = m.pow(2).flatten(1).sum(-1).sqrt()
            out[f"{name}.spectral"] = torch.linalg.matrix_norm(m, ord=2)
    return out


def review_metrics(weights: tuple[torch.Tensor, ...], w_star: torch.Tensor, batch: Batch, normalizer: str,
                   d: int) -> dict[str, torch.Tensor]:
    """K1 at the reference W* = c w* w*^T on the P-bearing queries of ``batch``, (S,) each.

    f^1 is positively homogeneous in W (ReLU(c s) = c ReLU(s), c > 0), so with m the margins
    y f^1 of W = w* w*^T, the reference with mean margin 1 is c = 1 / mean(m):
    ``review.K1_ref`` = mean softplus(-c m), ``review.ref_scale`` = c, and
    ``review.K1_ref_at_norm`` the same at c = ||W||_F of the trained W (||w* w*^T||_F = 1).
    By Jensen K1_ref >= log(1 + e^-1), the reviewer's floor. w_star (S, d)."""
    w, _, _ = block_matrices(weights, d)
    ref = torch.einsum("md,me->mde", w_star, w_star)  # (S, d, d) w* w*^T
    zero = torch.zeros_like(ref)
    matrices: tuple[torch.Tensor, ...]
    if len(weights) == 1:  # full weights: the reference sits in the P-P block
        ref = torch.cat([torch.cat([ref, zero], -1), torch.cat([zero, zero], -1)], -2)  # (S, 2d, 2d)
        matrices = (ref,)
    else:
        matrices = (ref, zero)
    f1, _ = branch_outputs(matrices, batch, normalizer, d)  # (S, N)
    margin = batch.target * f1  # (S, N)
    p_bearing = batch.kind != KINDS["q_only"]
    mean_margin = _masked_mean(margin, p_bearing)  # (S,)
    scale = 1.0 / mean_margin
    at_norm = w.pow(2).flatten(1).sum(-1).sqrt()
    k1 = lambda c: _masked_mean(logistic(c.unsqueeze(-1) * f1, batch.target), p_bearing)  # noqa: E731
    return {"review.K1_ref": k1(scale), "review.K1_ref_at_norm": k1(at_norm), "review.ref_scale": scale}
