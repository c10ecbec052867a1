"""Training of the NTP lab: two-stage normalized GD [paper, Algorithm 1] and its ablations,
batched over the ensemble axis S, with per-member step rules and resumable state.

Stage 1 (steps 1..T) updates W_ov on the collocation loss L0; stage 2 (steps T+1..T+T1)
freezes W_ov and updates W_kq on the main loss L. ``joint`` updates both on L for all
T+T1 steps with one jointly normalized gradient and step eta0. Step t's logged metrics
describe the weights after t updates (step 0 is the initialization); gradient norms are
those of the objective at those weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...engine import BatchedOptimizer, check_finite, group_norm, pack, resolve_dtype, schedules, unpack
from ...engine.driver import StepOutput, TrainingDriver
from ...engine.perf import training_threads
from ..contract import RunContext
from .config import Config
from .model import Forward, collocation_loss, cross_entropy, forward, gradients, predict, token_matrices, with_unknown
from .problem import STREAMS, Problem

OV, KQ = "ov", "kq"
EARLY_STEPS = 10  # every step is logged for the first steps of each stage (the log-log figures start there)


_flat_norm = group_norm


def cosine(w: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos(W, W*), ||W/||W|| - W*/||W*|| ||_F) per member; W = 0 gives (0, 1). w, target (S, a, b)."""
    nw, nt = _flat_norm([w]), _flat_norm([target])
    dot = (w * target).flatten(1).sum(-1)
    cos = torch.where(nw > 0, dot / (nw * nt).clamp_min(1e-300), torch.zeros_like(dot))
    unit = w / nw.clamp_min(1e-300)[:, None, None]
    dist = _flat_norm([unit - target / nt[:, None, None]])
    return cos, torch.where(nw > 0, dist, torch.ones_like(dist))


@dataclass
class Params:
    """Trainable tensors, merged (wkq, wov) or factored (wk, wq, wo, wv), each (S, ...)."""

    tensors: dict[str, torch.Tensor]
    factored: bool

    def merged(self) -> tuple[torch.Tensor, torch.Tensor]:
        t = self.tensors
        if not self.factored:
            return t["wkq"], t["wov"]
        return t["wk"].transpose(1, 2) @ t["wq"], t["wo"] @ t["wv"]  # (S, d, d), (S, V, d)

    def group(self, name: str) -> list[str]:
        if self.factored:
            return ["wo", "wv"] if name == OV else ["wk", "wq"]
        return ["wov"] if name == OV else ["wkq"]

    def chain(self, g_wkq: torch.Tensor | None, g_wov: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """Gradients of the factors from gradients of the merged matrices."""
        t = self.tensors
        if not self.factored:
            return {k: g for k, g in (("wkq", g_wkq), ("wov", g_wov)) if g is not None}
        out = {}
        if g_wkq is not None:  # W_kq = W_k^T W_q
            out["wk"] = t["wq"] @ g_wkq.transpose(1, 2)
            out["wq"] = t["wk"] @ g_wkq
        if g_wov is not None:  # W_ov = W_o W_v
            out["wo"] = g_wov @ t["wv"].transpose(1, 2)
            out["wv"] = t["wo"].transpose(1, 2) @ g_wov
        return out


def init_params(config: Config, problem: Problem, dtype: torch.dtype) -> Params:
    """Zero [paper] or i.i.d. normal (std init_scale) init, drawn per member seed."""
    S, d, V = problem.n_members, problem.emb.shape[1], problem.emb.shape[2]
    shapes = {"wk": (d, d), "wq": (d, d), "wo": (V, d), "wv": (d, d)} if config.model.factored else {"wkq": (d, d), "wov": (V, d)}
    tensors = {}
    for k, (name, shape) in enumerate(shapes.items()):
        if config.model.init == "zero":
            tensors[name] = torch.zeros(S, *shape, dtype=dtype, device=problem.emb.device)
        else:
            draws = [STREAMS.numpy(s, "init", k).standard_normal(shape) for s in problem.seeds]
            tensors[name] = config.model.init_scale * torch.tensor(np.stack(draws), dtype=dtype, device=problem.emb.device)
    return Params(tensors, config.model.factored)


@dataclass
class Evaluation:
    """Losses and gradients at the current weights, all batched over S."""

    key: torch.Tensor | None  # (S, V, V) K = E^T W_kq E (None without the main loss)
    tok: torch.Tensor  # (S, V, V) Z = W_ov E
    loss0: torch.Tensor | None  # (S,)
    grad0_wov: torch.Tensor | None  # (S, V, d) gradient of L0
    fwd: Forward | None  # the main loss's forward pass, or None
    grad_wov: torch.Tensor | None
    grad_wkq: torch.Tensor | None


def evaluate(params: Params, problem: Problem, need_main: bool, need_stage1: bool = True,
             need_wov_grad: bool = True, need_losses: bool = True) -> Evaluation:
    """L0's gradient (``need_stage1``); with ``need_main`` also L's gradients (the W_ov
    one only with ``need_wov_grad``); loss values only with ``need_losses``. Skipped parts
    are None."""
    emb = problem.emb_op
    wkq, wov = params.merged()
    key, tok = token_matrices(wkq if need_main else None, wov, emb)
    loss0 = grad0 = None
    if need_stage1:
        loss0, grad0 = collocation_loss(tok, emb, problem.colloc_onehot, need_losses)
    if key is None:  # not need_main: K was skipped
        return Evaluation(key, tok, loss0, grad0, None, None, None)
    fwd = forward(key, tok, problem.batch, need_losses)
    g_wov, g_wkq = gradients(fwd, tok, emb, problem.batch, need_wov=need_wov_grad)
    return Evaluation(key, tok, loss0, grad0, fwd, g_wov, g_wkq)


# metrics that depend on one weight group only: while that group is frozen (W_kq during
# stage 1, W_ov from the end of stage 1 on) they are computed once and reused, bit for bit
OV_METRICS = ("train.loss.stage1", "train.loss.floor", "W_ov.cos_target", "W_ov.dist_target", "W_ov.fro")
KQ_METRICS = ("W_kq.cos_target", "W_kq.dist_target", "W_kq.cos_prop2", "W_kq.dist_prop2", "W_kq.fro", "train.opt_attn.min",
              "train.opt_attn.mean", "train.score.optimal", "train.score.non_optimal", "train.score.non_comparable")


def _main_pass(ev: Evaluation) -> tuple[torch.Tensor, Forward]:
    """(K, the main loss's forward pass) of an evaluation made with ``need_main``."""
    if ev.key is None or ev.fwd is None:
        raise ValueError("the metrics need the main loss: evaluate with need_main=True")
    return ev.key, ev.fwd


def _present(value: torch.Tensor | None, what: str) -> torch.Tensor:
    """``value`` of an evaluation that was asked for it (``what`` names it in the error otherwise)."""
    if value is None:
        raise ValueError(f"{what} was not computed by this evaluation")
    return value


def _ov_metrics(wov: torch.Tensor, problem: Problem, ev: Evaluation) -> dict[str, torch.Tensor]:
    batch = problem.batch
    floor_logits = ev.tok.gather(2, problem.opt_tok.unsqueeze(1).expand(-1, ev.tok.shape[1], -1)).transpose(1, 2)  # (S, N, V)
    cos_ov, dist_ov = cosine(wov, problem.wov_star)
    return {"train.loss.stage1": _present(ev.loss0, "the stage-1 loss"),
            "train.loss.floor": (batch.weight * cross_entropy(floor_logits, batch.target)).sum(-1),
            "W_ov.cos_target": cos_ov, "W_ov.dist_target": dist_ov, "W_ov.fro": _flat_norm([wov])}


def _kq_metrics(wkq: torch.Tensor, problem: Problem, ev: Evaluation) -> dict[str, torch.Tensor]:
    cos_kq, dist_kq = cosine(wkq, problem.wkq_star)
    cos_p2, dist_p2 = cosine(wkq, problem.prop2_wkq)
    key, fwd = _main_pass(ev)
    opt_mass = (fwd.attn * problem.opt_mask).sum(-1)  # (S, N)
    multi = problem.multi
    masks = problem.type_masks  # (S, 3, V, V)
    type_score = (key.unsqueeze(1) * masks).flatten(2).sum(-1) / masks.flatten(2).sum(-1).clamp_min(1)  # (S, 3)
    return {"W_kq.cos_target": cos_kq, "W_kq.dist_target": dist_kq, "W_kq.cos_prop2": cos_p2, "W_kq.dist_prop2": dist_p2,
            "W_kq.fro": _flat_norm([wkq]),
            "train.opt_attn.min": opt_mass.masked_fill(~multi, 1.0).min(-1).values,
            "train.opt_attn.mean": (opt_mass * multi).sum(-1) / multi.sum(-1).clamp_min(1),
            "train.score.optimal": type_score[:, 0], "train.score.non_optimal": type_score[:, 1],
            "train.score.non_comparable": type_score[:, 2]}


def metrics(params: Params, problem: Problem, ev: Evaluation, stage: int, two_stage: bool,
            with_suite: bool = True, cached: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """All per-member metrics at the current weights; each value has shape (S,).

    ``with_suite`` adds ``test.acc.covered``, the accuracy on the covered generalization cases.
    ``cached`` holds the OV_METRICS or KQ_METRICS of a group that has not moved since they
    were computed (they are reused instead of recomputed; ``ev.loss0`` may then be None).
    """
    cached = cached or {}
    wkq, wov = params.merged()
    (key, fwd), batch = _main_pass(ev), problem.batch
    loss = _present(fwd.loss, "the main loss")
    group_ov = {k: cached[k] for k in OV_METRICS} if all(k in cached for k in OV_METRICS) else _ov_metrics(wov, problem, ev)
    group_kq = {k: cached[k] for k in KQ_METRICS} if all(k in cached for k in KQ_METRICS) else _kq_metrics(wkq, problem, ev)
    real = batch.weight > 0
    correct = (fwd.logits.argmax(-1) == batch.target) & real
    grad_ov = ev.grad0_wov if (two_stage and stage == 1) else ev.grad_wov
    S = wkq.shape[0]
    values = {
        "stage": torch.full((S,), float(stage), device=wkq.device),
        "train.loss.stage1": group_ov["train.loss.stage1"],
        "train.loss": loss,
        "train.loss.floor": group_ov["train.loss.floor"],
        "train.loss.gap": loss - group_ov["train.loss.floor"],
        **{k: group_ov[k] for k in ("W_ov.cos_target", "W_ov.dist_target", "W_ov.fro")},
        **{k: group_kq[k] for k in ("W_kq.cos_target", "W_kq.dist_target", "W_kq.cos_prop2", "W_kq.dist_prop2", "W_kq.fro",
                                    "train.opt_attn.min", "train.opt_attn.mean")},
        "train.acc": correct.sum(-1).to(wkq.dtype) / real.sum(-1).to(wkq.dtype),
        "W_ov.grad_fro": _flat_norm([_present(grad_ov, "the W_ov gradient")]),
        "W_kq.grad_fro": _flat_norm([_present(ev.grad_wkq, "the W_kq gradient")]),
        **{k: group_kq[k] for k in ("train.score.optimal", "train.score.non_optimal", "train.score.non_comparable")},
    }
    if with_suite:
        key, tok = with_unknown(key, ev.tok)
        pred, _ = predict(key, tok, problem.gen_idx, problem.gen_query, problem.gen_mask)  # (S, G)
        covered = problem.gen_expected >= 0
        hits = ((pred == problem.gen_expected) & covered).sum(-1).to(wkq.dtype)
        values["test.acc.covered"] = hits / covered.sum(-1).to(wkq.dtype)  # NaN when a suite covers no case
    return values


@dataclass(frozen=True)
class LogSchedule:
    """Which steps a run logs, and at which of them it runs the generalization suite.

    Logged: every multiple of the log interval, 0, T and T+T1, and with ``log_every: auto``
    every step of the first EARLY_STEPS of each stage (the log-log figures start there).
    The suite runs at 0, T, T+T1 and at the first logged step at or after each multiple of
    its interval (a pure function of t, so a resumed run evaluates it where the
    uninterrupted one did). The disk estimate counts the stream's lines from this too.
    """

    T: int
    total: int
    every: int
    suite_every: int
    early: frozenset[int]

    @classmethod
    def of(cls, config: Config) -> "LogSchedule":
        tc = config.train
        T, total = tc.steps_stage1, tc.steps_stage1 + tc.steps_stage2
        early = frozenset(range(0, EARLY_STEPS + 1)) | frozenset(range(T, T + EARLY_STEPS + 1)) \
            if tc.log_every == "auto" else frozenset()
        return cls(T, total, config.log_interval(), config.suite_interval(), early)

    def logged(self, t: int) -> bool:
        return t % self.every == 0 or t in (0, self.T, self.total) or t in self.early

    def previous(self, t: int) -> int:
        """The logged step before ``t`` (0 when there is none after 0)."""
        s = t - 1
        while s > 0 and not self.logged(s):
            s -= 1
        return s

    def suite(self, t: int) -> bool:
        """True at a logged step ``t`` that also runs the suite."""
        return self.suite_after(t, self.previous(t))

    def suite_after(self, t: int, previous: int) -> bool:
        """The suite rule at logged step ``t`` whose previous logged step is ``previous``."""
        return t in (0, self.T, self.total) or t // self.suite_every != previous // self.suite_every

    def count(self) -> int:
        """How many steps are logged."""
        extra = {t for t in {0, self.T, self.total} | self.early if t <= self.total and t % self.every}
        return self.total // self.every + 1 + len(extra)

    def steps(self) -> list[int]:
        """Every logged step, in order (materialized: for runs of a moderate count())."""
        extra = {t for t in {0, self.T, self.total} | self.early if t <= self.total}
        return sorted(set(range(0, self.total + 1, self.every)) | extra)


def train_two_stage(config: Config, problem: Problem, ctx: RunContext | None = None) -> Params:
    """Run the configured algorithm; log through ``ctx`` (None: no logging, no checkpoints).

    Returns the final parameters. Uses ``config.thread_count()`` torch threads meanwhile.
    """
    with training_threads(config.thread_count()):
        return _train(config, problem, ctx)


def _train(config: Config, problem: Problem, ctx: RunContext | None) -> Params:
    loop = TwoStageLoop(config, problem)
    schedule = LogSchedule.of(config)
    # check_finite is looked up here, at call time (tests replace this module's one)
    driver = TrainingDriver(ctx, problem.seeds, schedule.total, schedule.logged, "ntp", check=check_finite)
    driver.run(loop)
    return loop.params


PendingUpdate = tuple[dict[str, torch.Tensor], list[str], float, torch.Tensor]
"""The next update: (gradients by name, the names of its group, step size, active members (S,) bool)."""


class TwoStageLoop:
    """The updates of :func:`train_two_stage` behind the engine's :class:`~stagewise.engine.driver.Loop`.

    ``step(t)`` applies update t (its gradient comes from the evaluation at step t-1),
    then evaluates the weights after t updates: the metrics when logged and the gradient
    of update t+1 (the per-member tiny-gradient guard and the stage-2 optimizer reset act
    here, at step t). A resumed loop first re-evaluates its checkpoint's step, unlogged.
    """

    def __init__(self, config: Config, problem: Problem):
        self.config, self.problem, tc = config, problem, config.train
        self.dtype = resolve_dtype(config.model.dtype)
        self.T, self.total = tc.steps_stage1, tc.steps_stage1 + tc.steps_stage2
        self.two_stage = tc.algorithm == "two_stage"
        self.lr_stage1, self.lr_stage2 = config.step_sizes(problem.emb.shape[1])  # eta0, eta
        self.params = init_params(config, problem, self.dtype)
        self.opt = BatchedOptimizer(tc.optimizer, tc.betas, tc.adam_eps, tc.weight_decay)
        self.active = torch.ones(problem.n_members, dtype=torch.bool, device=problem.emb.device)
        # sum reduction: L0 sums over the |V| collocation samples, L over each member's samples
        summed = tc.loss_reduction == "sum"
        self.scale_ov = float(problem.emb.shape[-1]) if summed else 1.0
        self.scale_main = (problem.batch.weight > 0).sum(-1).to(self.dtype).view(-1, 1, 1) if summed else 1.0  # (S, 1, 1)
        self.schedule = LogSchedule.of(config)
        self.frozen_values: dict[str, dict[str, torch.Tensor]] = {}
        self.pending: PendingUpdate | None = None  # (grads, names, lr, mask) of the next update

    def stage_of(self, t: int) -> int:
        return 1 if t <= self.T else 2  # step 0 (the init) counts as stage 1

    def learning_rate(self, t: int) -> float:
        """The step size of update t: two-stage, eta0 (``train.lr_stage1``) for t <= T, then eta
        (``train.lr_stage2``); joint, eta0 throughout (:mod:`stagewise.engine.schedules`)."""
        if self.two_stage:
            return schedules.two_stage(t, self.lr_stage1, self.lr_stage2, self.T)
        return schedules.constant(t, self.lr_stage1)

    def frozen_groups(self, t: int) -> tuple[str, ...]:
        """Weight groups that have not moved since the start of their frozen span."""
        if not self.two_stage:
            return ()
        return (("kq",) if t <= self.T else ()) + (("ov",) if t >= self.T else ())

    def restore(self, checkpoint) -> int:
        device = self.problem.emb.device
        tensors = checkpoint.tensors
        self.params.tensors = unpack(tensors, "p", device)
        self.opt.state = unpack(tensors, "opt", device)
        self.active = tensors["active"].bool().to(device)
        return checkpoint.step

    def weights(self) -> dict[str, torch.Tensor]:
        return self.params.tensors

    def state(self) -> dict[str, torch.Tensor]:
        return pack(p=self.params.tensors, opt=self.opt.state, active=self.active.to(torch.uint8))

    def meta(self, t: int) -> dict[str, int]:
        return {"stage": self.stage_of(t)}

    def after(self, t: int) -> None:
        """No lab work between a step's record and its checkpoint."""

    def diverged(self, t: int) -> None:
        """No values of its own for a step whose weights are not finite (the driver's check reports it)."""
        return None

    def step(self, t: int, log: bool) -> StepOutput:
        if t > 0:
            if self.pending is None:  # resumed: the gradient at the checkpoint's weights
                self.evaluate(t - 1, False)
            if self.pending is None:
                raise RuntimeError("evaluate() did not set the next update")
            grads, names, lr, mask = self.pending
            self.opt.step(self.params.tensors, grads, names, lr, mask)
        return self.evaluate(t, log)

    def evaluate(self, t: int, log_now: bool) -> StepOutput:
        """The weights after t updates: the metrics (``log_now``) and the gradient of update t+1."""
        params, problem, tc, two_stage, T = self.params, self.problem, self.config.train, self.two_stage, self.T
        stage_next = self.stage_of(t + 1)
        need_main = log_now or not (two_stage and stage_next == 1)
        stage1_update = two_stage and stage_next == 1
        frozen = self.frozen_groups(t)
        self.frozen_values = {g: v for g, v in self.frozen_values.items() if g in frozen}
        ev = evaluate(params, problem, need_main, need_stage1=(log_now and "ov" not in self.frozen_values) or stage1_update,
                      need_wov_grad=log_now or not two_stage, need_losses=log_now)
        # gradient of the objective of the next update (step t+1)
        if stage1_update:
            g0_wov = _present(ev.grad0_wov, "the W_ov gradient of L0")
            grads, names = params.chain(None, g0_wov * self.scale_ov), params.group(OV)
        elif two_stage:
            g_wkq = _present(ev.grad_wkq, "the W_kq gradient")
            grads, names = params.chain(g_wkq * self.scale_main, None), params.group(KQ)
        else:
            g_wkq, g_wov = _present(ev.grad_wkq, "the W_kq gradient"), _present(ev.grad_wov, "the W_ov gradient")
            grads = params.chain(g_wkq * self.scale_main, g_wov * self.scale_main)
            names = params.group(OV) + params.group(KQ)
        lr = self.learning_rate(t + 1)
        gnorm = _flat_norm([grads[n] for n in names])  # (S,)
        tiny = (gnorm <= tc.grad_tol) | (gnorm == 0)
        if two_stage and t == T and T > 0:
            self.active = torch.ones(problem.n_members, dtype=torch.bool, device=problem.emb.device)  # the guard acts per stage
            self.opt.reset()
        if tc.on_tiny_grad == "stop":
            self.active = self.active & ~tiny
        self.pending = (grads, names, lr, self.active if tc.on_tiny_grad == "stop" else gnorm > 0)
        if not log_now:
            return StepOutput()
        suite = self.schedule.suite(t)  # see LogSchedule
        cached = {k: v for g in frozen for k, v in self.frozen_values.get(g, {}).items()}
        values = metrics(params, problem, ev, self.stage_of(t), two_stage, suite, cached)
        for g in frozen:
            self.frozen_values.setdefault(g, {k: values[k] for k in (OV_METRICS if g == "ov" else KQ_METRICS)})
        values["tiny_grad"] = tiny.to(self.dtype)
        values["frozen"] = (~self.active).to(self.dtype)
        return StepOutput(values, losses={n: values[n] for n in ("train.loss", "train.loss.stage1")})
