"""An evaluation's per-example scores and categories (:class:`Evaluation`), from last-position
logits (:func:`score_logits`), and the authors' recording of them during training
(:class:`TrainPassRecorder`, ``train.record=train-before-step``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .categories import AnswerSpace, categorize, categorize_open


@dataclass(frozen=True, eq=False)
class Evaluation:
    """One epoch's evaluation of every example (answer framing).

    Attributes:
        top_rows: (N, k) model rows of the top-k tokens; top_probs: (N, k) their probabilities.
        answer_rank: (N,) 1-based rank of the answer (1 = top-1); answer_logprob: (N,).
        codes: (N,) category codes of the closed-world rule (categories.SEMANTIC / TYPE_CORRECT / TYPE_WRONG).
        codes_open: (N,) codes of the open-world rule (also EXCLUDED), or None without types.
        codes_user: (N,) codes of a researcher's own rule (a tracked run's ``categorize``), or None.
    """

    top_rows: torch.Tensor
    top_probs: torch.Tensor
    answer_rank: torch.Tensor
    answer_logprob: torch.Tensor
    codes: torch.Tensor
    codes_open: torch.Tensor | None = None
    codes_user: torch.Tensor | None = None


def score_logits(logits: torch.Tensor, target: torch.Tensor, k: int) -> tuple[torch.Tensor, ...]:
    """(top rows (B, k), top probabilities (B, k) float64, answer rank (B,), answer log-prob (B,)
    float64), on the CPU, of last-position logits (B, V') against the answers' rows (B,)."""
    logp = torch.log_softmax(logits.detach().float(), dim=-1)  # (B, V')
    answer = logp.gather(1, target[:, None])  # (B, 1)
    values, idx = logp.topk(k, dim=-1)  # (B, k)
    rank = (logp > answer).sum(-1) + 1  # (B,)
    return idx.cpu(), values.exp().double().cpu(), rank.cpu(), answer[:, 0].double().cpu()


def evaluation(space: AnswerSpace, top_rows: torch.Tensor, top_probs: torch.Tensor, rank: torch.Tensor,
               logprob: torch.Tensor) -> Evaluation:
    """The :class:`Evaluation` of every example from its scores (:func:`score_logits`), under both rules."""
    codes = categorize(space, top_rows[:, 0])
    codes_open = categorize_open(space, top_rows[:, 0]) if space.types is not None else None
    return Evaluation(top_rows, top_probs, rank, logprob, codes, codes_open)



class TrainPassRecorder:
    """The authors' recording (``train.record=train-before-step``): each example's scores from
    the training forward pass (train mode, before its batch's update), gathered over an epoch.

    Buffers: top rows (N, k), top probabilities (N, k), answer rank (N,), answer log-prob (N,),
    seen (N,) bool; checkpointed with the loop's state, so a resumed epoch keeps its records."""

    FIELDS = ("top_rows", "top_probs", "rank", "logprob", "seen")

    def __init__(self, targets: torch.Tensor, k: int):
        n = len(targets)
        self.targets, self.k = targets, k  # (N,) the answers' model rows
        self.top_rows = torch.zeros(n, k, dtype=torch.long)
        self.top_probs = torch.zeros(n, k, dtype=torch.float64)
        self.rank = torch.zeros(n, dtype=torch.long)
        self.logprob = torch.zeros(n, dtype=torch.float64)
        self.seen = torch.zeros(n, dtype=torch.bool)

    def add(self, rows: torch.Tensor, logits: torch.Tensor) -> None:
        """Score the batch ``rows`` (B,) from its training-pass logits (B, V')."""
        top, probs, rank, logprob = score_logits(logits, self.targets[rows].to(logits.device), self.k)
        self.top_rows[rows], self.top_probs[rows], self.rank[rows], self.logprob[rows] = top, probs, rank, logprob
        self.seen[rows] = True

    def clear(self) -> None:
        self.seen.zero_()

    def evaluation(self, space: AnswerSpace) -> Evaluation:
        if not bool(self.seen.all()):
            raise RuntimeError(f"train-before-step recording: {int((~self.seen).sum())} examples not seen this epoch")
        return evaluation(space, self.top_rows.clone(), self.top_probs.clone(), self.rank.clone(), self.logprob.clone())

    def state(self) -> dict[str, torch.Tensor]:
        return {f"rec.{f}": getattr(self, f) for f in self.FIELDS}

    def restore(self, tensors: dict[str, torch.Tensor]) -> None:
        for f in self.FIELDS:
            if f"rec.{f}" in tensors:
                getattr(self, f).copy_(tensors[f"rec.{f}"])
