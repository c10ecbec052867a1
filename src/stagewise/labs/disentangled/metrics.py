"""Metrics of the disentangled lab (spec section 3), per member, shape (M,) each.

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


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over prompts where mask holds: (M, N) -> (M,); NaN where no prompt qualifies."""
    mask = mask.to(values.dtype)
    return (values * mask).sum(-1) / mask.sum(-1)


def block_matrices(weights: tuple[torch.Tensor, ...], d: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(W, V, blockdiag(W, V)) of block weights, or the P-P block, Q-Q block and the whole
    matrix of full weights; (M, d, d), (M, d, d), (M, 2d, 2d)."""
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
    scores = all_scores(weights, batch)  # (M, B, N, C): one contraction for the output and both parts
    fwd = forward(weights, batch, output, normalizer, scores)
    loss = logistic(fwd.f, batch.target)  # (M, N)
    correct = (torch.sign(fwd.f) == batch.target).to(loss.dtype)  # f = 0 counts as wrong
    f1, f2 = branch_outputs(weights, batch, normalizer, d, scores if len(weights) == 2 else None)
    w, v, _ = block_matrices(weights, d)
    half_l2 = 0.5 * l2
    sq = [m.pow(2).flatten(1).sum(-1) for m in weights]
    part1, part2 = logistic(f1, batch.target), logistic(f2, batch.target)  # (M, N)
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
    }
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


def weight_metrics(weights: tuple[torch.Tensor, ...], d: int, spectra: bool) -> dict[str, torch.Tensor]:
    """Norms (always) and full spectra (when ``spectra``) of W, V and blockdiag(W, V) ("WV")."""
    w, v, whole = block_matrices(weights, d)
    out = {}
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
