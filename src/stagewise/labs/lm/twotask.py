"""Measurements of the two-task study (issue 27; docs/lm.md "The two-task study"): each
task's label prior, the held-out evaluation at every record, BLiMP minimal pairs on the
held-out paradigms. The claim read from these records is judged in :func:`.claims.syntax_claim`.

**Label prior** of a task: the marginal ``p`` of its answers on the TRAINING set (after the
one-token filter and any permutation). Its floor is the entropy

    floor = H(p) = -sum_c p_c ln p_c    (nats; ln 2 = 0.693 for balanced BLiMP)

the log loss of the best input-blind predictor on the training set, and its majority share
``max_c p_c`` the accuracy of the best constant one. Every record logs, per task T:

=======================================  =====================================================
``prior.floor.T``, ``prior.majority.T``  H(p), max_c p_c (constants)
``eval.loss.T``, ``eval.accuracy.T``     mean -log p(answer), top-1 accuracy on held-out examples
``eval.loss_minus_floor.T``              eval.loss.T - H(p) (< 0: below the prior's floor)
``eval.accuracy_minus_majority.T``       eval.accuracy.T - max_c p_c (> 0: beats the majority)
``train.loss_minus_floor.T``,            the same on the training set's evaluation (train.loss.T,
``train.accuracy_minus_majority.T``      train.accuracy.T)
``eval.blimp_minimal_pair``              share of held-out BLiMP pairs with log P(good) >= log P(bad)
=======================================  =====================================================

Minimal pairs are scored as ``eval blimp`` scores them (:mod:`stagewise.lmkit.blimp`): the
total log-probability of ``" " + sentence`` after the BOS token, a tie counting as right; here
through the lab's own batched sentence scorer on the model's (compact) rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from ...errors import UserError
from ...lmkit.blimp import LM_EVAL_DELIMITER
from ...lmkit.models import LoadedModel
from ...lmkit.scoring import prefix_token_id
from ..contract import RunContext

from .batching import Encoded, to_rows, tokenize
from .categories import SEMANTIC, AnswerSpace, answer_space, category_names, row_strings
from .controls import split_note
from .records import Evaluation
from .tasks import BLIMP_FRAME, Example, single_token_answers
from .train import evaluate_answers, evaluate_sentences
from . import claimspecs as cs


BLIMP_PROMPT_TAIL = BLIMP_FRAME.split("{sentence}", 1)[1]
"""What follows the sentence in a BLiMP prompt (the sentence is read back from the prompt)."""


@dataclass(frozen=True)
class LabelPrior:
    """A task's label marginal on the training set (module docstring).

    Attributes:
        task: the task.
        labels: the distinct answers, sorted; shares: their shares p_c (sum 1).
        floor: H(p) in nats. majority: the most frequent answer (the first in sorted order
            at a tie); majority_share: its share.
    """

    task: str
    labels: tuple[str, ...]
    shares: tuple[float, ...]
    floor: float
    majority: str
    majority_share: float

    def as_dict(self) -> dict[str, Any]:
        return {"labels": dict(zip(self.labels, self.shares)), "floor": self.floor, "majority": self.majority,
                "majority_share": self.majority_share}


def entropy(shares: Sequence[float] | np.ndarray) -> float:
    """H(p) = -sum_c p_c ln p_c in nats (0 ln 0 = 0)."""
    p = np.asarray(shares, dtype=np.float64)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def label_prior(task: str, answers: Sequence[str]) -> LabelPrior:
    """The :class:`LabelPrior` of ``answers`` (one per training example of ``task``)."""
    if not answers:
        raise ValueError(f"task {task}: no training answers to take a label prior of")
    counts = Counter(answers)
    labels = tuple(sorted(counts))
    shares = np.array([counts[c] for c in labels], dtype=np.float64) / len(answers)  # (C,)
    top = int(np.argmax(shares))  # the first maximum: the first label in sorted order at a tie
    return LabelPrior(task, labels, tuple(shares.tolist()), entropy(shares), labels[top], float(shares[top]))


def label_priors(items: Sequence[Example]) -> dict[str, LabelPrior]:
    """Per task of ``items`` (in order of appearance), its :class:`LabelPrior`."""
    tasks = dict.fromkeys(e.task for e in items)
    return {task: label_prior(task, [e.answer for e in items if e.task == task]) for task in tasks}


def prior_metrics(prefix: str, task: str, prior: LabelPrior, logprob: torch.Tensor,
                  correct: torch.Tensor) -> dict[str, torch.Tensor]:
    """``{prefix}.loss_minus_floor.T`` = mean(-logprob) - floor and
    ``{prefix}.accuracy_minus_majority.T`` = mean(correct) - majority share, of one task's
    examples: log-probabilities of their answers (N,) and top-1 correctness (N,) bool."""
    return {f"{prefix}.loss_minus_floor.{task}": (-logprob.double()).mean() - prior.floor,
            f"{prefix}.accuracy_minus_majority.{task}": correct.double().mean() - prior.majority_share}


def minimal_pair_texts(examples: Sequence[Example]) -> tuple[list[str], list[str]]:
    """(pair keys (M,), texts (2M,): the M good sentences, then the M bad ones, each after
    the lm-eval delimiter) of the BLiMP pairs whose good and bad examples are both present;
    the kind comes from the id (``.../good``, ``.../bad``), not the answer, which the
    permuted-labels control changes."""
    sentence: dict[tuple[str, str], str] = {}
    for e in examples:
        if e.task == "blimp":
            key, kind = e.id.rsplit("/", 1)
            if not e.prompt.endswith(BLIMP_PROMPT_TAIL):
                raise ValueError(f"example {e.id}: its prompt does not end with the BLiMP frame's tail")
            sentence[key, kind] = e.prompt[: -len(BLIMP_PROMPT_TAIL)]
    keys = [k for k in dict.fromkeys(k for k, _ in sentence) if (k, "good") in sentence and (k, "bad") in sentence]
    texts = [LM_EVAL_DELIMITER + sentence[k, kind] for kind in ("good", "bad") for k in keys]
    return keys, texts


def pair_accuracy(nll: torch.Tensor) -> torch.Tensor:
    """Share of pairs whose good sentence has the higher total log-probability (a tie is
    right), from the summed NLL (2M,) of the M good sentences followed by the M bad ones."""
    m = nll.shape[0] // 2
    return (nll[:m] <= nll[m:]).double().mean()  # -log P(good) <= -log P(bad)


@dataclass(frozen=True, eq=False)
class HeldoutData:
    """The held-out examples and minimal pairs in ORIGINAL token ids (before the compact
    vocabulary), with the training set's label priors.

    Attributes:
        items: the M_e held-out examples (one-token answers); ids (M_e, L) right-padded,
            lengths (M_e,), targets (M_e,) the answers' token ids.
        pair_keys: the M held-out BLiMP pairs; pair_ids (2M, L') good then bad sentences
            after the prefix token, pair_lengths (2M,); empty without held-out BLiMP.
        priors: task -> :class:`LabelPrior` of the training set.
        note: the split (:func:`.controls.split_note`) and the dropped multi-token answers.
    """

    items: list[Example]
    ids: torch.Tensor
    lengths: torch.Tensor
    targets: torch.Tensor
    pair_keys: tuple[str, ...]
    pair_ids: torch.Tensor
    pair_lengths: torch.Tensor
    priors: dict[str, LabelPrior]
    note: dict[str, Any]

    def used_ids(self) -> torch.Tensor:
        """Every token id the held-out records read (for the compact vocabulary)."""
        real = torch.arange(self.ids.shape[1])[None, :] < self.lengths[:, None]  # (M_e, L)
        pair_real = torch.arange(self.pair_ids.shape[1])[None, :] < self.pair_lengths[:, None]  # (2M, L')
        return torch.cat([self.ids[real], self.targets, self.pair_ids[pair_real]])


def heldout_data(cfg: Any, tok: Any, train_items: Sequence[Example], held: list[Example]) -> HeldoutData:
    """The held-out examples ``held`` tokenized (multi-token answers dropped and counted, as for
    training) and their BLiMP minimal pairs; the priors of the training examples."""
    kept, dropped = single_token_answers(held, tok)
    if not kept:
        raise UserError("task.heldout: no held-out example has a one-token answer for this tokenizer")
    ids, lengths = tokenize(tok, [e.prompt for e in kept])  # (M_e, L), (M_e,)
    targets = torch.tensor([r[0] for r in tok([e.answer for e in kept], add_special_tokens=False)["input_ids"]])
    keys, texts = minimal_pair_texts(kept)
    if keys:
        pair_ids, pair_lengths = tokenize(tok, texts, prefix=prefix_token_id(tok))  # (2M, L'), (2M,)
    else:
        pair_ids, pair_lengths = torch.zeros(0, 1, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    note = {"split": split_note(train_items, kept), "dropped_multi_token": dropped, "minimal_pairs": len(keys)}
    return HeldoutData(kept, ids, lengths, targets, tuple(keys), pair_ids, pair_lengths, label_priors(train_items), note)


@dataclass(frozen=True, eq=False)
class HeldoutSet:
    """:class:`HeldoutData` in the model's rows: ``enc`` the held-out examples (task indices
    of the run's task order), ``space`` their answer space, ``pairs`` the 2M minimal-pair
    sentences (lm layout; None without held-out BLiMP)."""

    enc: Encoded
    space: AnswerSpace
    pairs: Encoded | None
    priors: dict[str, LabelPrior]
    note: dict[str, Any]


def in_rows(cfg: Any, data: HeldoutData, loaded: LoadedModel) -> HeldoutSet:
    """``data`` mapped to the model's rows (compact vocabulary) with its answer space."""
    tok, table = loaded.tokenizer, loaded.to_compact()
    pad = int(to_rows(torch.tensor([tok.pad_token_id]), table)[0])
    tasks = tuple(cfg.task.tasks())
    index = {name: i for i, name in enumerate(tasks)}
    items = data.items
    enc = Encoded(ids=to_rows(data.ids, table), lengths=data.lengths, targets=to_rows(data.targets, table),
                  task=torch.tensor([index[e.task] for e in items], dtype=torch.long), tasks=tasks,
                  example_ids=tuple(e.id for e in items), pad=pad)
    strings = row_strings(tok, loaded.vocab_ids, loaded.vocab_size)
    space = answer_space([e.answer for e in items], [e.group for e in items], strings)
    pairs = None
    if data.pair_keys:
        n = len(data.pair_keys)
        pairs = Encoded(ids=to_rows(data.pair_ids, table), lengths=data.pair_lengths,
                        targets=torch.full((2 * n,), -1, dtype=torch.long), task=torch.zeros(2 * n, dtype=torch.long),
                        tasks=("blimp",), example_ids=(*data.pair_keys, *data.pair_keys), pad=pad)
    return HeldoutSet(enc, space, pairs, data.priors, data.note)


class HeldoutEval:
    """The record hook of :func:`.train.record_epoch`: at every record, evaluates the held-out
    examples and minimal pairs, writes the ``heldout_predictions`` table part and returns the
    metrics of the module docstring (logged with the record's own)."""

    def __init__(self, cfg: Any, held: HeldoutSet, device: torch.device, vocab_ids: torch.Tensor | None):
        self.cfg, self.held, self.device, self.vocab_ids = cfg, held, device, vocab_ids

    def __call__(self, ctx: RunContext, model: Any, step: int, epoch: float, enc: Encoded,
                 ev: Evaluation) -> dict[str, torch.Tensor]:
        held, cfg = self.held, self.cfg
        model.eval()  # the loop puts it back in train mode before its next update
        hev = evaluate_answers(model, held.enc, held.space, cfg, self.device)
        out: dict[str, torch.Tensor] = {}
        for task, prior in held.priors.items():
            mine, trained = held.enc.task == held.enc.tasks.index(task), enc.task == enc.tasks.index(task)  # (M_e,), (N,)
            logprob, correct = hev.answer_logprob[mine], hev.codes[mine] == SEMANTIC
            out.update({f"prior.floor.{task}": torch.tensor(prior.floor, dtype=torch.float64),
                        f"prior.majority.{task}": torch.tensor(prior.majority_share, dtype=torch.float64),
                        f"eval.loss.{task}": (-logprob).mean(), f"eval.accuracy.{task}": correct.double().mean(),
                        **prior_metrics("eval", task, prior, logprob, correct),
                        **prior_metrics("train", task, prior, ev.answer_logprob[trained], ev.codes[trained] == SEMANTIC)})
        if held.pairs is not None:
            nll, _ = evaluate_sentences(model, held.pairs, cfg, self.device)  # (2M,) summed NLL
            out["eval.blimp_minimal_pair"] = pair_accuracy(nll)
        ctx.log_table("heldout_predictions", self.records(hev, epoch), part=step)
        return out

    def records(self, hev: Evaluation, epoch: float) -> pd.DataFrame:
        """The held-out part of one record: example_id, task, epoch, category, top1_id (a
        tokenizer id), answer_rank, answer_logprob."""
        enc = self.held.enc
        top1 = hev.top_rows[:, 0] if self.vocab_ids is None else self.vocab_ids[hev.top_rows[:, 0]]  # (M_e,)
        return pd.DataFrame({"example_id": list(enc.example_ids),
                             "task": np.asarray(enc.tasks, dtype=object)[enc.task.numpy()],
                             "epoch": np.full(len(enc), epoch, dtype=np.float64), "category": category_names(hev.codes),
                             "top1_id": top1.numpy(), "answer_rank": hev.answer_rank.numpy(),
                             "answer_logprob": hev.answer_logprob.numpy()})


def heldout_hook(cfg: Any, held: HeldoutSet | None, ctx: RunContext, device: torch.device,
                 vocab_ids: torch.Tensor | None) -> HeldoutEval | None:
    """The run's :class:`HeldoutEval` (None without ``task.heldout``); notes the split and the
    label priors in the manifest (``notes.heldout``, ``notes.label_priors``)."""
    if held is None:
        return None
    note_heldout(ctx, held)
    return HeldoutEval(cfg, held, device, vocab_ids)


def note_heldout(ctx: RunContext, held: HeldoutSet) -> None:
    """The held-out split and the label priors into the manifest (``notes.heldout``, ``notes.label_priors``)."""
    ctx.note("heldout", held.note)
    ctx.note("label_priors", {task: prior.as_dict() for task, prior in held.priors.items()})


# The records ``syntax_before_semantics`` is read from (issue 27; judged in :func:`.claims.syntax_claim`,
# declared in :data:`.claimspecs.SYNTAX_BEFORE_SEMANTICS`), and its stage conditions.
#
# A task's **beat-the-prior epoch** is the first record epoch ``e_i`` with
#
#     eval.accuracy_minus_majority.T >= m   at records i, i+1, ..., i+R-1
#
# (``m`` = :data:`.claimspecs.PRIOR_MARGIN`, ``R`` = :data:`.claimspecs.PRIOR_RECORDS`
# consecutive records); None when no such record exists ("T never beats its prior").

TASKS = ("blimp", "sick")
NAMES = {"blimp": "BLiMP", "sick": "SICK"}


def record_series(frame: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, epochs, values) of a per-record metric, by step (records carry ``epoch``)."""
    rows = frame[frame["metric"].isin(["epoch", metric])]
    wide = rows.pivot_table(index="step", columns="metric", values="value")
    if metric not in wide or "epoch" not in wide:
        empty = np.array([], dtype=float)
        return empty, empty, empty
    wide = wide.dropna(subset=["epoch", metric]).sort_index()
    return wide.index.to_numpy(float), wide["epoch"].to_numpy(float), wide[metric].to_numpy(float)


def sustained(values: np.ndarray, margin: float, records: int) -> np.ndarray:
    """(K,) the smallest of ``values[i : i + records]`` minus ``margin`` (NaN where fewer than
    ``records`` records remain): >= 0 exactly where the beat-the-prior condition holds from record i."""
    out = np.full(len(values), np.nan)
    if len(values) >= records:
        windows = np.lib.stride_tricks.sliding_window_view(values, records)  # (K - records + 1, records)
        out[: len(windows)] = windows.min(axis=1) - margin
    return out


def beat_epoch(epochs: np.ndarray, excess: np.ndarray, margin: float = cs.PRIOR_MARGIN,
               records: int = cs.PRIOR_RECORDS) -> float | None:
    """The first epoch from which ``excess`` >= ``margin`` at ``records`` consecutive records; None if never."""
    hits = np.nonzero(sustained(excess, margin, records) >= 0)[0]
    return float(epochs[hits[0]]) if len(hits) else None


def _num(x: float | None) -> int | float | None:
    return None if x is None else int(x) if float(x).is_integer() else round(float(x), 4)


def task_facts(frame: pd.DataFrame, task: str) -> dict[str, Any]:
    """One task's numbers: its prior, its beat-the-prior epoch, and its held-out values at the
    last record and at their best."""
    _, epochs, excess = record_series(frame, f"eval.accuracy_minus_majority.{task}")
    facts: dict[str, Any] = {"records": int(len(epochs)), "beat_prior_epoch": _num(beat_epoch(epochs, excess))}
    if not len(epochs):
        return facts
    facts["last_epoch"] = _num(epochs[-1])
    for metric in ("prior.floor", "prior.majority", "eval.loss", "eval.accuracy", "eval.loss_minus_floor",
                   "eval.accuracy_minus_majority", "train.loss_minus_floor", "train.accuracy_minus_majority"):
        _, _, values = record_series(frame, f"{metric}.{task}")
        facts[f"{metric}_end"] = float(values[-1]) if len(values) else None
    facts["eval.accuracy_minus_majority_max"] = float(np.max(excess))
    _, _, gap = record_series(frame, f"eval.loss_minus_floor.{task}")
    facts["eval.loss_minus_floor_min"] = float(np.min(gap)) if len(gap) else None
    if task == "blimp":
        _, _, pairs = record_series(frame, "eval.blimp_minimal_pair")
        facts["eval.blimp_minimal_pair_end"] = float(pairs[-1]) if len(pairs) else None
        facts["eval.blimp_minimal_pair_max"] = float(np.max(pairs)) if len(pairs) else None
    return facts


def stage_conditions(config: Any, frame: pd.DataFrame) -> list[pd.DataFrame]:
    """The derived rows (step, seed, metric, value) of ``{task}_beats_prior`` for
    :func:`~stagewise.measure.detect_stages`: :func:`sustained` of the held-out accuracy minus
    the majority share, >= 0 exactly from the record where the claim's condition holds."""
    out: list[pd.DataFrame] = []
    if config.task.heldout is None:
        return out
    for task in (t for t in TASKS if t in config.task.tasks()):
        rows = frame[frame["metric"] == f"eval.accuracy_minus_majority.{task}"].sort_values("step")
        for seed, g in rows.groupby("seed"):
            values = sustained(g["value"].to_numpy(float), cs.PRIOR_MARGIN, cs.PRIOR_RECORDS)
            out.append(pd.DataFrame({"step": g["step"].to_numpy(), "seed": seed, "metric": f"{task}_beats_prior",
                                     "value": values}))
    return out
