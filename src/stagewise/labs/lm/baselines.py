"""No-attention baselines trained beside the run's model: the declared controls of the type claims.

The audit of issue 27 found that a model without attention reproduces the "type-correct
before facts" phase: what the claim measures is a model that sees the prompt's template
learning the template's frequent answer of the right type before subject-specific facts.
These baselines make that explanation a control the transformer must beat.

Each baseline is a linear softmax over features of the prompt's real tokens x_1..x_n
(a shared embedding table E, (V'+1, d); row V' stands for "no token"):

* ``bow``: logits = W [ (1/n) sum_i E x_i ] + b, W (V', d): a mean bag of words, no order;
* ``bow-last``: logits = W [ (1/n) sum_i E x_i ; E x_n ; E x_{n-1} ; ... ; E x_{n-k+1} ] + b,
  W (V', (k+1) d): the bag plus the last k tokens in place (k = ``baselines.last_k``; "no
  token" where n < k): enough to read the template's end, still no attention.

They train on the same examples, in the same batches and order, with the same optimizer
kind, weight decay and schedule as the run (the rate ``baselines.lr``, default the run's;
a from-scratch linear model at a pretrained model's 5e-6 barely moves, so the lm presets of
a pretrained model declare their own), and are recorded at the same points, with the same
recording (an eval pass, or the training pass before each update), into the
``baseline_predictions`` table, categorised by the same rules.

A lead measured against one baseline rate compares learning speeds (issue 38: the lead claim
flipped between 1e-3 and 1e-2), so ``baselines.lr_grid`` trains every kind at each rate of a
declared grid in the same run: the records of ``bow-last2`` at 0.01 carry ``bow-last2@lr0.01``,
and the schedule's factor multiplies every rate alike. Each (kind, rate) is its own small model
and optimizer (a few milliseconds a step next to the transformer's forward and backward pass).

Cost (issue 41): the bag is one ``embedding_bag``, the optimizer fused (``make_optimizer(...,
fused=True)``), and on a free core the training loop runs their step beside the transformer's
(:func:`.train.beside_pool`): what is left is their output layer, the arithmetic of a softmax
over every answer row (docs/benchmarks.md).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from ...engine import load_optimizer_tensors, load_parameters, optimizer_tensors, unpack
from .batching import Encoded
from .config import Config
from .categories import EXCLUDED, SEMANTIC, TYPE_CORRECT, TYPE_WRONG, AnswerSpace, category_names
from .records import Evaluation, TrainPassRecorder, evaluation, score_logits

INIT_SCALE = 0.02
"""Standard deviation of the embeddings' and the output matrix's initial entries (GPT-2's)."""

BASELINE_SEED_OFFSET = 7_919
"""The baselines' initialisation generator is seeded by ``seed * 1_000_003 + BASELINE_SEED_OFFSET``:
independent of the model's initialisation and the shuffling stream."""


RATE_MARK = "@lr"
"""Separates a baseline's kind from its rate in a grid run's names: ``bow-last2@lr0.01``."""


def baseline_name(kind: str, last_k: int, rate: float | None = None) -> str:
    """The name a baseline's records carry: ``bow`` or ``bow-last2``, with ``@lrR`` in a grid run."""
    name = kind if kind == "bow" else f"bow-last{last_k}"
    return name if rate is None else f"{name}{RATE_MARK}{rate:g}"


def baseline_rate(name: str) -> float | None:
    """The rate in a grid run's baseline name (None: the run's one baseline rate)."""
    return float(name.split(RATE_MARK, 1)[1]) if RATE_MARK in name else None


class Baseline(torch.nn.Module):
    """One no-attention baseline (see the module docstring).

    Args:
        n_rows: V', the model's output rows (the answers' row ids).
        d: embedding width.
        last_k: tokens read in place (0: the plain bag of words).
        generator: seeds the initial weights.
    """

    def __init__(self, n_rows: int, d: int, last_k: int, generator: torch.Generator):
        super().__init__()
        self.n_rows, self.last_k = n_rows, last_k
        self.embed = torch.nn.Parameter(torch.randn(n_rows + 1, d, generator=generator) * INIT_SCALE)  # (V'+1, d)
        self.out = torch.nn.Parameter(torch.randn(n_rows, (last_k + 1) * d, generator=generator) * INIT_SCALE)  # (V', (k+1)d)
        self.bias = torch.nn.Parameter(torch.zeros(n_rows))  # (V',)

    def features(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, (k+1) d) features of right-padded prompts ``ids`` (B, L) with ``lengths`` (B,).

        The bag is one ``embedding_bag`` (mean) with the padding as its ``padding_idx`` (row V',
        left out of each mean and of the gradient): a gather and a scatter of the prompts' rows,
        never a dense (B, L, d) product or a dense pass over the table (issue 41)."""
        real = torch.arange(ids.shape[1], device=ids.device)[None, :] < lengths[:, None]  # (B, L)
        bags = torch.where(real, ids.clamp(max=self.n_rows), self.n_rows)  # (B, L): padding -> row V'
        parts = [F.embedding_bag(bags, self.embed, mode="mean", padding_idx=self.n_rows)]  # (B, d) the mean bag of words
        if self.last_k:  # the j-th token from the end, or "no token", for j < k: one gather
            col = lengths[:, None] - 1 - torch.arange(self.last_k, device=ids.device)[None, :]  # (B, k)
            tok = torch.where(col >= 0, ids.gather(1, col.clamp(min=0)), self.n_rows)  # (B, k)
            parts.append(F.embedding(tok, self.embed).flatten(1))  # (B, k, d) -> (B, k d)
        return torch.cat(parts, dim=1)  # (B, (k+1) d)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, V') logits."""
        return self.features(ids, lengths) @ self.out.T + self.bias  # (B, V')


class Baselines:
    """The run's baselines, their optimizers and (with the authors' recording) their recorders.

    ``kinds``: ``bow`` / ``bow-last``, each at every rate of ``rates`` (None: the one rate the
    caller passes to :meth:`step`); every step goes through :meth:`step` with the same rows as
    the model's update; :meth:`evaluate` scores every example; :meth:`state` / :meth:`restore`
    checkpoint them with the run. A kind's initial weights are the same at every rate."""

    def __init__(self, kinds: list[str], last_k: int, d: int, n_rows: int, seed: int, top_k: int,
                 make_optimizer: Any, targets: torch.Tensor, record_train_pass: bool,
                 rates: list[float | None] | None = None):
        rates = rates or [None]
        self.models: dict[str, Baseline] = {}
        self.rates: dict[str, float | None] = {}
        gen = torch.Generator().manual_seed(seed * 1_000_003 + BASELINE_SEED_OFFSET)
        for kind in kinds:
            first = Baseline(n_rows, d, 0 if kind == "bow" else last_k, gen)
            for rate in rates:  # the same start at every rate: only the rate differs
                self.models[baseline_name(kind, last_k, rate)] = copy.deepcopy(first)
                self.rates[baseline_name(kind, last_k, rate)] = rate
        self.names = list(self.models)
        self.opts = {name: make_optimizer(list(m.parameters())) for name, m in self.models.items()}
        self.k = min(top_k, n_rows)
        self.recorders = {name: TrainPassRecorder(targets, self.k) for name in self.names} if record_train_pass else None

    def step(self, enc: Encoded, rows: torch.Tensor, lr: float, factor: float = 1.0) -> None:
        """One update of every baseline on the batch ``rows`` (B,): at rate ``lr``, or in a grid
        run at its own rate x ``factor`` (the schedule's factor at this step); the authors'
        recording scores the batch before the update."""
        ids, lengths, target = enc.ids[rows], enc.lengths[rows], enc.targets[rows]  # (B, L), (B,), (B,)
        for name, model in self.models.items():
            opt = self.opts[name]
            rate = self.rates[name]
            for group in opt.param_groups:
                group["lr"] = lr if rate is None else rate * factor
            logits = model(ids, lengths)  # (B, V')
            if self.recorders is not None:
                self.recorders[name].add(rows, logits)
            loss = F.cross_entropy(logits, target)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    @torch.inference_mode()
    def evaluate(self, enc: Encoded, space: AnswerSpace, batch: int) -> dict[str, Evaluation]:
        """Every baseline's :class:`~.records.Evaluation` of every example: from the epoch's
        training pass (authors' recording, then cleared) or an evaluation now."""
        out: dict[str, Evaluation] = {}
        for name, model in self.models.items():
            if self.recorders is not None:
                out[name] = self.recorders[name].evaluation(space)
                self.recorders[name].clear()
                continue
            n = len(enc)
            top = torch.empty(n, self.k, dtype=torch.long)
            probs = torch.empty(n, self.k, dtype=torch.float64)
            rank = torch.empty(n, dtype=torch.long)
            logprob = torch.empty(n, dtype=torch.float64)
            for rows in torch.split(torch.arange(n), batch):
                logits = model(enc.ids[rows], enc.lengths[rows])  # (B, V')
                top[rows], probs[rows], rank[rows], logprob[rows] = score_logits(logits, enc.targets[rows], self.k)
            out[name] = evaluation(space, top, probs, rank, logprob)
        return out

    def state(self) -> dict[str, torch.Tensor]:
        """Parameters, optimizer states and recorders as ``baseline.NAME.*`` tensors."""
        out: dict[str, torch.Tensor] = {}
        for name, model in self.models.items():
            out.update({f"baseline.{name}.param.{k}": p.detach() for k, p in model.named_parameters()})
            out.update({f"baseline.{name}.opt.{k}": v for k, v in optimizer_tensors(self.opts[name]).items()})
            if self.recorders is not None:
                out.update({f"baseline.{name}.{k}": v for k, v in self.recorders[name].state().items()})
        return out

    def restore(self, tensors: dict[str, torch.Tensor]) -> None:
        """The state :meth:`state` saved; a checkpoint without it (written before the run had
        baselines) is refused: the baselines would not have seen the same batches."""
        for name, model in self.models.items():
            prefix = f"baseline.{name}."
            if not any(k.startswith(prefix) for k in tensors):
                raise ValueError(f"the checkpoint holds no state of baseline {name}: it was written without baselines")
            load_parameters(model, unpack(tensors, prefix + "param"))
            load_optimizer_tensors(self.opts[name], unpack(tensors, prefix + "opt"))
            if self.recorders is not None:
                self.recorders[name].restore({k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix + "rec.")})


def make_baselines(cfg: Config, model: Any, enc: Encoded, make_optimizer: Any) -> Baselines | None:
    """The run's baselines (``baselines.kinds``; answer framing), on the CPU: the same rows and
    ``make_optimizer(params)``, the model's optimizer kind; None without any."""
    b = cfg.baselines
    if not b.kinds or cfg.task.framing != "answer":
        return None
    n_rows = int(model.get_output_embeddings().weight.shape[0])
    return Baselines(list(b.kinds), b.last_k, b.d, n_rows, cfg.seed, cfg.train.top_k, make_optimizer, enc.targets,
                     cfg.train.record == "train-before-step", b.rates())


def baseline_records(enc: Encoded, evaluations: dict[str, Evaluation], epoch: float,
                     vocab_ids: torch.Tensor | None) -> pd.DataFrame:
    """The ``baseline_predictions`` table part of one record: per baseline and example the
    top-1 id (original tokenizer ids), the answer's rank and log-probability and both rules'
    categories."""
    parts = []
    tasks = np.asarray(enc.tasks, dtype=object)[enc.task.numpy()]
    for name, ev in evaluations.items():
        top1 = ev.top_rows[:, 0] if vocab_ids is None else vocab_ids[ev.top_rows[:, 0]]  # (N,)
        parts.append(pd.DataFrame({
            "baseline": name, "example_id": list(enc.example_ids), "task": tasks,
            "epoch": np.full(len(enc), epoch, dtype=np.float64), "category": category_names(ev.codes),
            "category_open": category_names(ev.codes_open) if ev.codes_open is not None
            else np.full(len(enc), None, dtype=object),
            "top_id": top1.numpy(), "answer_rank": ev.answer_rank.numpy(), "answer_logprob": ev.answer_logprob.numpy()}))
    return pd.concat(parts, ignore_index=True)


def baseline_metrics(evaluations: dict[str, Evaluation]) -> dict[str, torch.Tensor]:
    """``baseline.NAME.{loss, semantic_correct, type_correct, type_wrong, type_correct_open, ...}``."""
    out: dict[str, torch.Tensor] = {}
    for name, ev in evaluations.items():
        out[f"baseline.{name}.loss"] = (-ev.answer_logprob).mean()
        for code, label in ((SEMANTIC, "semantic_correct"), (TYPE_CORRECT, "type_correct"), (TYPE_WRONG, "type_wrong")):
            out[f"baseline.{name}.{label}"] = (ev.codes == code).sum().double()
        if ev.codes_open is not None:
            out[f"baseline.{name}.type_correct_open"] = (ev.codes_open == TYPE_CORRECT).sum().double()
            out[f"baseline.{name}.type_wrong_open"] = (ev.codes_open == TYPE_WRONG).sum().double()
            out[f"baseline.{name}.excluded_open"] = (ev.codes_open == EXCLUDED).sum().double()
    return out
