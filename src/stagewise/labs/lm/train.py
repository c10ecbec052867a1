"""Fine-tuning with per-epoch records (the paper's GPT-2 setting, with the spec's fixes).

Answer framing: loss = cross-entropy of the logits at each prompt's true last token
against the answer's one token, mean over the batch; batches of ``train.batch_size`` in
dataset order; AdamW (``torch.optim``: one model, not an ensemble). LM framing: mean
next-token NLL over the batch's real tokens.

Before training and after every epoch the whole training set is evaluated (eval mode, no
dropout): epoch 0 is the model before any update. The learning rate is a pure function of
(epoch, step), so a resumed run needs no scheduler state:

* constant: lr;  exponential: lr * gamma^(epoch - 1) in epoch 1, 2, ...;
* cosine: lr * (1 + cos(pi * step / total_steps)) / 2 at optimizer step ``step``.

Checkpoints hold the parameters, the optimizer state and the torch RNG state (dropout), at
epoch ends every ``train.checkpoint_every`` epochs and at the next step after SIGINT/SIGTERM;
a resumed run repeats the uninterrupted one exactly.
"""

from __future__ import annotations

import dataclasses
import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from ...engine import check_finite, load_optimizer_tensors, load_parameters, optimizer_tensors, schedules, unpack
from ...engine.driver import StepOutput, TrainingDriver
from ..contract import RunContext
from .baselines import Baselines, baseline_metrics, baseline_records, make_baselines
from .batching import Encoded, dataset_batches, last_logits, layout, length_sorted_batches, token_nll
from .categories import EXCLUDED, SEMANTIC, TYPE_CORRECT, TYPE_WRONG, AnswerSpace, category_names
from .records import Evaluation, TrainPassRecorder, evaluation, score_logits
from .config import Config

SpectraHook = Callable[[Any], tuple[dict[str, torch.Tensor], pd.DataFrame | None]]
RecordHook = Callable[[RunContext, Any, int, float, Encoded, Evaluation], dict[str, torch.Tensor]]
"""(ctx, model, step, epoch, training set, its evaluation) -> more metrics of the record (twotask.HeldoutEval)."""


def learning_rate(cfg: Config, epoch: int, step: int, total_steps: int) -> float:
    """The rate at optimizer step ``step`` (0-based) of epoch ``epoch`` (1-based): ``train.schedule``
    on :mod:`stagewise.engine.schedules` (exponential decays once per epoch; cosine runs from
    ``train.lr`` to 0 over the ``total_steps`` optimizer steps)."""
    t = cfg.train
    if t.schedule == "exponential":
        return schedules.exponential(epoch - 1, t.lr, t.gamma)
    if t.schedule == "cosine":
        return schedules.cosine(step, total_steps, t.lr)
    return schedules.constant(step, t.lr)


def make_optimizer(cfg: Config, params: list[torch.nn.Parameter], *, fused: bool = False) -> torch.optim.Optimizer:
    """The run's optimizer (``train.optimizer``) over ``params``; ``fused``: Adam and AdamW as one
    fused kernel (the baselines' small models, where the per-tensor steps cost more than their
    arithmetic; the same update to float round-off)."""
    t = cfg.train
    if t.optimizer == "sgd":
        return torch.optim.SGD(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
    kind = torch.optim.Adam if t.optimizer == "adam" else torch.optim.AdamW
    return kind(params, lr=t.lr, betas=t.betas, eps=t.adam_eps, weight_decay=t.weight_decay, fused=fused or None)


# ------------------------------------------------------------------ evaluation
@torch.inference_mode()
def evaluate_answers(model: Any, enc: Encoded, space: AnswerSpace, cfg: Config, device: torch.device) -> Evaluation:
    """Top-k, answer rank and log-probability, and category of every example."""
    t = cfg.train
    original = t.reproduce_original_padding
    # the authors' padding depends on the batch's composition: keep their batches then
    batches = dataset_batches(len(enc), t.batch_size) if original else length_sorted_batches(enc.lengths, t.eval_batch_size)
    n, k = len(enc), min(t.top_k, model.get_input_embeddings().weight.shape[0])
    top_rows = torch.empty(n, k, dtype=torch.long)
    top_probs = torch.empty(n, k, dtype=torch.float64)
    rank = torch.empty(n, dtype=torch.long)
    logprob = torch.empty(n, dtype=torch.float64)
    for rows in batches:
        ids, mask, pos, last = layout(enc, rows, t.padding, original)
        logits = last_logits(model, ids.to(device), _dev(mask, device), _dev(pos, device), last)  # (B, V')
        top_rows[rows], top_probs[rows], rank[rows], logprob[rows] = score_logits(logits, enc.targets[rows].to(device), k)
    return evaluation(space, top_rows, top_probs, rank, logprob)


@torch.inference_mode()
def evaluate_sentences(model: Any, enc: Encoded, cfg: Config, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed NLL (N,), target tokens (N,)) of every sentence (lm framing)."""
    total = torch.empty(len(enc), dtype=torch.float64)
    for rows in length_sorted_batches(enc.lengths, cfg.train.eval_batch_size):
        ids, mask, pos, _ = layout(enc, rows, "right")
        nll = token_nll(model, ids.to(device), mask.to(device), pos.to(device))  # (B, L-1)
        total[rows] = nll.sum(1).double().cpu()
    return total, (enc.lengths - 1).to(torch.float64)


def _dev(x: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    return None if x is None else x.to(device)


def answer_metrics(enc: Encoded, ev: Evaluation) -> dict[str, torch.Tensor]:
    """Per task and overall: loss (mean -log p(answer)), the three category counts, accuracy."""
    out: dict[str, torch.Tensor] = {}
    groups = [("", torch.ones(len(enc), dtype=torch.bool))] + [(f".{name}", enc.task == i) for i, name in enumerate(enc.tasks)]
    for suffix, sel in groups:
        if len(enc.tasks) == 1 and suffix:
            continue
        codes = ev.codes[sel]
        out[f"train.loss{suffix}"] = (-ev.answer_logprob[sel]).mean()
        out[f"train.semantic_correct{suffix}"] = (codes == SEMANTIC).sum().double()
        out[f"train.type_correct{suffix}"] = (codes == TYPE_CORRECT).sum().double()
        out[f"train.type_wrong{suffix}"] = (codes == TYPE_WRONG).sum().double()
        out[f"train.accuracy{suffix}"] = (codes == SEMANTIC).double().mean()
        if ev.codes_open is not None:  # the open-world rule (semantic-correct is the same under both)
            opened = ev.codes_open[sel]
            out[f"train.type_correct_open{suffix}"] = (opened == TYPE_CORRECT).sum().double()
            out[f"train.type_wrong_open{suffix}"] = (opened == TYPE_WRONG).sum().double()
            out[f"train.excluded_open{suffix}"] = (opened == EXCLUDED).sum().double()
        if ev.codes_user is not None:  # a researcher's own rule (it decides semantic-correct too)
            mine = ev.codes_user[sel]
            out[f"train.semantic_correct_user{suffix}"] = (mine == SEMANTIC).sum().double()
            out[f"train.type_correct_user{suffix}"] = (mine == TYPE_CORRECT).sum().double()
            out[f"train.type_wrong_user{suffix}"] = (mine == TYPE_WRONG).sum().double()
            out[f"train.excluded_user{suffix}"] = (mine == EXCLUDED).sum().double()
    return out


def sentence_metrics(enc: Encoded, nll: torch.Tensor, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per task and overall: mean NLL per target token."""
    out = {"train.loss": nll.sum() / tokens.sum()}
    if len(enc.tasks) > 1:
        for i, name in enumerate(enc.tasks):
            sel = enc.task == i
            out[f"train.loss.{name}"] = nll[sel].sum() / tokens[sel].sum()
    return out


def prediction_records(enc: Encoded, ev: Evaluation, epoch: float, vocab_ids: torch.Tensor | None,
                       space: AnswerSpace | None = None) -> pd.DataFrame:
    """The ``predictions`` table part of one epoch (top ids in *original* tokenizer ids); with
    the open rule's types, ``top1_kind`` (the kind of the top-1 token, categories.KIND_ORDER)
    and ``asked_type`` (the example's declared type)."""
    top = ev.top_rows if vocab_ids is None else vocab_ids[ev.top_rows]  # (N, k)
    types = space.types if space is not None else None
    kinds = {} if types is None else {"top1_kind": np.asarray(types.kind_names(ev.top_rows[:, 0]), dtype=object),
                                      "asked_type": np.asarray(types.example_types(), dtype=object)}
    return pd.DataFrame({
        "example_id": list(enc.example_ids),
        "task": np.asarray(enc.tasks, dtype=object)[enc.task.numpy()],
        "epoch": np.full(len(enc), epoch, dtype=np.float64),
        "category": category_names(ev.codes),
        "top_ids": list(top.numpy()),
        "top_probs": list(ev.top_probs.numpy()),
        "answer_rank": ev.answer_rank.numpy(),
        "answer_logprob": ev.answer_logprob.numpy(),
        "category_open": category_names(ev.codes_open) if ev.codes_open is not None else np.full(len(enc), None, dtype=object),
        **kinds,
        **({"category_user": category_names(ev.codes_user)} if ev.codes_user is not None else {}),
    })


def sentence_records(enc: Encoded, nll: torch.Tensor, tokens: torch.Tensor, epoch: float) -> pd.DataFrame:
    return pd.DataFrame({"example_id": list(enc.example_ids), "task": np.asarray(enc.tasks, dtype=object)[enc.task.numpy()],
                         "epoch": np.full(len(enc), epoch, dtype=np.float64), "nll": nll.numpy(),
                         "tokens": tokens.numpy().astype(np.int64)})


# ------------------------------------------------------------------ state
def pack_state(model: Any, opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Parameters (tied ones once), optimizer state and the CPU RNG state as named tensors."""
    tensors = {**weights(model), **{f"opt.{k}": v for k, v in optimizer_tensors(opt).items()}}
    tensors["rng.cpu"] = torch.get_rng_state()
    if torch.cuda.is_available():
        tensors["rng.cuda"] = torch.cuda.get_rng_state()
    return tensors


def unpack_state(tensors: dict[str, torch.Tensor], model: Any, opt: torch.optim.Optimizer) -> None:
    load_parameters(model, unpack(tensors, "model"))
    load_optimizer_tensors(opt, unpack(tensors, "opt"))
    torch.set_rng_state(tensors["rng.cpu"])
    if "rng.cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng.cuda"])


def weights(model: Any) -> dict[str, torch.Tensor]:
    """Parameters as ``model.NAME`` tensors (tied ones once), the layout of snapshots."""
    return {f"model.{name}": p.detach() for name, p in model.named_parameters()}


# ------------------------------------------------------------------ training
def epoch_order(cfg: Config, n: int, epoch: int) -> torch.Tensor | None:
    """Row order of ``epoch``: dataset order, or a permutation seeded by (seed, epoch)."""
    if not cfg.train.shuffle:
        return None
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=gen)


def batch_loss(model: Any, enc: Encoded, rows: torch.Tensor, cfg: Config, device: torch.device,
               per_task: torch.Tensor | None = None,
               record: Callable[[torch.Tensor, torch.Tensor], None] | None = None) -> torch.Tensor:
    """The batch's mean loss; adds each task's (summed loss, count) to ``per_task`` (T, 2)
    when given (count = examples, or target tokens in the lm framing); ``record(rows, logits)``
    receives the answer framing's last-position logits (B, V') of this forward pass (the
    authors' recording, ``train.record=train-before-step``)."""
    t = cfg.train
    mask: torch.Tensor | None  # None in the original padding layout (answer framing)
    pos: torch.Tensor | None
    if cfg.task.framing == "lm":
        ids, mask, pos, _ = layout(enc, rows, "right")
        nll = token_nll(model, ids.to(device), mask.to(device), pos.to(device))  # (B, L-1)
        summed, counts = nll.sum(1), mask[:, 1:].sum(1).to(nll.dtype)  # (B,), (B,)
        loss = summed.sum() / counts.sum()
    else:
        ids, mask, pos, last = layout(enc, rows, t.padding, t.reproduce_original_padding)
        logits = last_logits(model, ids.to(device), _dev(mask, device), _dev(pos, device), last)  # (B, V')
        summed = F.cross_entropy(logits.float(), enc.targets[rows].to(device), reduction="none")  # (B,)
        if record is not None:
            record(rows, logits)
        counts = torch.ones_like(summed)
        loss = summed.mean()
    if per_task is not None:
        task = enc.task[rows]
        per_task[:, 0].index_add_(0, task, summed.detach().double().cpu())
        per_task[:, 1].index_add_(0, task, counts.detach().double().cpu())
    return loss


def train(cfg: Config, model: Any, enc: Encoded, ctx: RunContext, device: torch.device, *,
          space: AnswerSpace | None, vocab_ids: torch.Tensor | None, spectra: SpectraHook | None = None,
          heldout: RecordHook | None = None) -> int:
    """Evaluate at epoch 0, then train ``train.epochs`` epochs with an evaluation after each;
    returns the number of optimizer steps taken. ``heldout`` adds to every answer-framing record."""
    loop = FineTuneLoop(cfg, model, enc, ctx, device, space, vocab_ids, spectra)
    loop.heldout = heldout
    n, epochs = loop.n_batches, cfg.train.epochs

    def logged(step: int) -> bool:
        return step % cfg.train.log_every == 0 or step % n == 0  # every log_every steps and at epoch ends

    def checkpoint_due(step: int) -> bool:
        """At the next step after a stop request; at the end of every checkpoint_every-th epoch but the last."""
        return ctx.stop_requested() or (step % n == 0 and ctx.should_checkpoint(step // n) and step // n < epochs)

    TrainingDriver(ctx, [cfg.seed], loop.total, logged, "fine-tuning", checkpoint_due, check_finite).run(loop)
    return loop.updates


class FineTuneLoop:
    """The optimizer steps of :func:`train` behind the engine's :class:`~stagewise.engine.driver.Loop`.

    Step t is optimizer step t (batch ``t - (epoch - 1) * n_batches`` of its epoch); after
    an epoch's last step the whole training set is evaluated (``after``), so a checkpoint at
    an epoch end holds the next epoch's start.
    """

    heldout: RecordHook | None = None  # the held-out evaluation of every record (task.heldout)

    def __init__(self, cfg: Config, model: Any, enc: Encoded, ctx: RunContext, device: torch.device,
                 space: AnswerSpace | None, vocab_ids: torch.Tensor | None, spectra: SpectraHook | None):
        self.cfg, self.model, self.enc, self.ctx, self.device = cfg, model, enc, ctx, device
        self.space, self.vocab_ids, self.spectra = space, vocab_ids, spectra
        self.n_batches = math.ceil(len(enc) / cfg.train.batch_size)
        self.total = self.n_batches * cfg.train.epochs
        self.opt = make_optimizer(cfg, [p for p in model.parameters() if p.requires_grad])
        self.epoch, self.batch, self.updates = 1, 0, 0
        self.batches: list[torch.Tensor] | None = None  # the current epoch's batches (rows)
        # per-task training loss since the last logged step (mixtures): (T, 2) summed loss, count
        self.per_task = torch.zeros(len(enc.tasks), 2, dtype=torch.float64) if len(enc.tasks) > 1 else None
        # train.record=train-before-step: the epoch's training-pass scores of every example, filled batch by batch
        self.recorder = TrainPassRecorder(enc.targets, min(cfg.train.top_k, model.get_input_embeddings().weight.shape[0])) \
            if cfg.train.record == "train-before-step" and cfg.task.framing == "answer" else None
        self.baselines = make_baselines(cfg, model, enc, lambda params: make_optimizer(cfg, params, fused=True))
        self.beside = beside_pool(self.baselines is not None, device)  # the baselines' step on a core of its own

    def restore(self, checkpoint) -> int:
        unpack_state(checkpoint.tensors, self.model, self.opt)
        meta = checkpoint.meta
        self.epoch, self.batch, self.updates = meta["epoch"], meta["batch"], meta["step"]
        if "acc.per_task" in checkpoint.tensors:
            self.per_task = checkpoint.tensors["acc.per_task"].clone()
        if self.recorder is not None:
            self.recorder.restore(checkpoint.tensors)
        if self.baselines is not None:
            self.baselines.restore(checkpoint.tensors)
        if self.batch == self.n_batches:  # saved before its epoch's evaluation (older runs)
            self.end_epoch()
        return self.updates

    def weights(self) -> dict[str, torch.Tensor]:
        """Parameters with a leading member axis of 1 (one model)."""
        return {name: p.detach()[None] for name, p in self.model.named_parameters()}

    def state(self) -> dict[str, torch.Tensor]:
        state = pack_state(self.model, self.opt)
        if self.per_task is not None:
            state["acc.per_task"] = self.per_task
        if self.recorder is not None:
            state.update(self.recorder.state())
        if self.baselines is not None:
            state.update(self.baselines.state())
        return state

    def meta(self, t: int) -> dict[str, int]:
        return {"epoch": self.epoch, "batch": self.batch, "step": self.updates}

    def diverged(self, t: int) -> None:
        """No values of its own for a step whose weights are not finite (the driver's check reports it)."""
        return None

    def step(self, t: int, log: bool) -> StepOutput:
        cfg, model, enc = self.cfg, self.model, self.enc
        if t == 0:
            if self.recorder is None:  # the authors' recording has no epoch 0: its first record is epoch 1's training pass
                record_epoch(cfg, model, enc, self.ctx, self.device, 0, 0, self.space, self.vocab_ids, self.spectra,
                             baselines=self.baselines, heldout=self.heldout)
            if self.recorder is not None and 0 in cfg.train.eval_epochs:
                self.extra_evaluation(0, 0)
            if 0 in cfg.train.snapshot_epochs or cfg.train.epochs == 0:
                snapshot(self.ctx, model, self.vocab_ids, 0, 0)
            return StepOutput()
        if self.batches is None or self.batch == 0:
            model.train()
            self.batches = dataset_batches(len(enc), cfg.train.batch_size, epoch_order(cfg, len(enc), self.epoch))
        lr = learning_rate(cfg, self.epoch, self.updates, self.total)
        for group in self.opt.param_groups:
            group["lr"] = lr
        rows = self.batches[self.batch]
        beside = None
        if self.baselines is not None:  # the same batch, at the same point of the schedule; joined before this step ends
            rates = (lr * (cfg.baselines.lr or cfg.train.lr) / cfg.train.lr, lr / cfg.train.lr)
            if self.beside is not None:
                beside = self.beside.submit(self.baselines.step, enc, rows, *rates)
            else:
                self.baselines.step(enc, rows, *rates)
        loss = batch_loss(model, enc, rows, cfg, self.device, self.per_task,
                          self.recorder.add if self.recorder is not None else None)
        guard = {f"training loss in epoch {self.epoch}": loss.detach().reshape(1)}
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.train.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
        self.opt.step()
        if beside is not None:
            beside.result()  # the baselines' update done (its error raised here): the step's state is whole
        self.updates, self.batch = self.updates + 1, self.batch + 1
        if not log:
            return StepOutput(guard=guard)
        values = {"train.batch_loss": loss.detach().reshape(1).cpu(), "lr": torch.tensor([lr])}  # on the CPU with lr (cuda runs)
        if self.per_task is not None:
            mean = self.per_task[:, 0] / self.per_task[:, 1].clamp(min=1)  # (T,) since the last log
            values.update({f"train.batch_loss.{name}": mean[i].reshape(1)
                           for i, name in enumerate(enc.tasks) if self.per_task[i, 1] > 0})
            self.per_task.zero_()
        return StepOutput(values, guard=guard)

    def after(self, t: int) -> None:
        """Spectra, evaluations inside the epoch, and at its end the epoch's evaluation and snapshot."""
        cfg, step = self.cfg, self.updates
        if self.spectra is not None and cfg.train.spectra_every and step % cfg.train.spectra_every == 0:
            log_spectra(self.ctx, step, self.model, self.spectra)
        if cfg.train.eval_every and step % cfg.train.eval_every == 0 and self.batch < self.n_batches:  # inside the epoch
            record_epoch(cfg, self.model, self.enc, self.ctx, self.device, step / self.n_batches, step, self.space,
                         self.vocab_ids, None, baselines=self.baselines, heldout=self.heldout)
            self.model.train()
        if self.batch == self.n_batches:
            self.end_epoch()

    def extra_evaluation(self, epoch: int, step: int) -> None:
        """``train.eval_epochs`` beside the authors' recording: an eval-mode evaluation of the
        training set into ``eval_predictions`` and ``eval.*`` metrics (the model back in train mode)."""
        if self.space is None:
            raise ValueError("the answer framing needs its answer space")
        self.model.eval()
        ev = evaluate_answers(self.model, self.enc, self.space, self.cfg, self.device)
        self.ctx.log_table("eval_predictions", prediction_records(self.enc, ev, epoch, self.vocab_ids, self.space), part=step)
        values = {"eval." + k.removeprefix("train."): v for k, v in answer_metrics(self.enc, ev).items()}
        values["eval.epoch"] = torch.tensor(float(epoch))
        self.ctx.log(step, {k: v.reshape(1).double() for k, v in values.items()})
        self.model.train()

    def end_epoch(self) -> None:
        """The evaluation (and snapshot) after the epoch's last step; moves to the next epoch."""
        cfg, epoch, step = self.cfg, self.epoch, self.updates
        record_epoch(cfg, self.model, self.enc, self.ctx, self.device, epoch, step, self.space, self.vocab_ids,
                     self.spectra, self.recorder, baselines=self.baselines, heldout=self.heldout)
        if self.recorder is not None and epoch in cfg.train.eval_epochs:
            self.extra_evaluation(epoch, step)
        if epoch in cfg.train.snapshot_epochs or epoch == cfg.train.epochs:
            snapshot(self.ctx, self.model, self.vocab_ids, epoch, step)
        self.epoch, self.batch = epoch + 1, 0


def beside_pool(baselines: bool, device: torch.device) -> ThreadPoolExecutor | None:
    """A one-thread pool that runs the baselines' step beside the transformer's (issue 41) when a
    core is free for it: the baselines on the CPU while the model trains on a GPU, or the torch
    threads fewer than the cores this process may use. Their models, batches and optimizers are
    their own and each step is joined before the step ends, so the numbers are those of running
    one after the other (tested); None: one after the other."""
    if not baselines:
        return None
    global _BESIDE
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if device.type == "cpu" and torch.get_num_threads() + 1 > cores:
        return None
    if _BESIDE is None:  # one worker thread for the process, made once
        _BESIDE = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stagewise-baselines")
    return _BESIDE


_BESIDE: ThreadPoolExecutor | None = None


def _forget_beside() -> None:
    """In a forked child the pool's thread is gone: the child makes its own when it needs one."""
    global _BESIDE
    _BESIDE = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_beside)


def snapshot(ctx: RunContext, model: Any, vocab_ids: torch.Tensor | None, epoch: int, step: int) -> None:
    """Keep the weights of ``epoch`` (and the compact vocabulary's ids) in snapshots/."""
    kept = weights(model) if vocab_ids is None else {**weights(model), "vocab_ids": vocab_ids}
    ctx.save_snapshot(f"epoch_{epoch:05d}", kept, {"epoch": epoch, "step": step})


def log_spectra(ctx: RunContext, step: int, model: Any, spectra: SpectraHook) -> None:
    """Spectra statistics as metrics at ``step`` (the singular values go to the table at epoch ends)."""
    metrics, _ = spectra(model)
    ctx.log(step, {k: v.reshape(1) for k, v in metrics.items()})


def record_epoch(cfg: Config, model: Any, enc: Encoded, ctx: RunContext, device: torch.device, epoch: float, step: int,
                 space: AnswerSpace | None, vocab_ids: torch.Tensor | None, spectra: SpectraHook | None,
                 recorder: TrainPassRecorder | None = None, baselines: Baselines | None = None,
                 heldout: RecordHook | None = None, user_rule: Callable[[Evaluation], torch.Tensor] | None = None) -> None:
    """Log the epoch's records at ``step``: metrics and the table part ``step`` (``epoch`` is
    fractional for evaluations inside an epoch: step / steps per epoch). The records are an
    eval-mode evaluation of every example, or, with ``recorder``, the epoch's training-pass
    scores (which it then clears). ``baselines`` are recorded the same way, beside the model;
    ``user_rule`` gives the codes of a researcher's own category rule (``category_user``)."""
    if cfg.task.framing == "lm":
        model.eval()
        nll, tokens = evaluate_sentences(model, enc, cfg, device)
        ctx.log_table("sentence_losses", sentence_records(enc, nll, tokens, epoch), part=step)
        log_values(ctx, step, epoch, sentence_metrics(enc, nll, tokens))
    else:
        if space is None:
            raise ValueError("the answer framing needs its answer space")
        pool = beside_pool(baselines is not None, device)  # the baselines' evaluation beside the model's (a free core)
        pending = pool.submit(baselines.evaluate, enc, space, cfg.train.eval_batch_size) \
            if pool is not None and baselines is not None else None
        if recorder is not None:
            ev = recorder.evaluation(space)
            recorder.clear()
        else:
            model.eval()
            ev = evaluate_answers(model, enc, space, cfg, device)
        if user_rule is not None:
            ev = dataclasses.replace(ev, codes_user=user_rule(ev))
        ctx.log_table("predictions", prediction_records(enc, ev, epoch, vocab_ids, space), part=step)
        values = answer_metrics(enc, ev)
        if baselines is not None:
            scored = pending.result() if pending is not None else baselines.evaluate(enc, space, cfg.train.eval_batch_size)
            ctx.log_table("baseline_predictions", baseline_records(enc, scored, epoch, vocab_ids), part=step)
            values.update(baseline_metrics(scored))
        if heldout is not None:
            values.update(heldout(ctx, model, step, epoch, enc, ev))
        log_values(ctx, step, epoch, values)
    if spectra is not None and cfg.train.spectra_every:
        metrics, table = spectra(model)
        if step == 0:
            ctx.log(0, {k: v.reshape(1) for k, v in metrics.items()})
        if table is not None:  # every singular value, once per epoch (a table part per epoch)
            ctx.log_table("spectra", table.assign(epoch=epoch, step=step), part=step)


def log_values(ctx: RunContext, step: int, epoch: float, values: dict[str, torch.Tensor]) -> None:
    """An evaluation's metrics and its ``epoch`` at ``step``."""
    values["epoch"] = torch.tensor(float(epoch))
    ctx.log(step, {k: v.reshape(1).double() for k, v in values.items()})
