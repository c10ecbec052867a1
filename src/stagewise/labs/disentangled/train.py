"""How one group of the disentangled lab trains: one batched pass over its members.

Read top to bottom: a :class:`Group` (which members, how their records are named), the
learning rate of a step (the config's schedule on :mod:`stagewise.engine.schedules`), the
update noise, one :func:`update` of every member, the loops behind the engine's
:class:`~stagewise.engine.driver.TrainingDriver` (:class:`UpdateLoop`: the updates;
:class:`GroupLoop`: with the measurements and the group's tables), and :func:`train_group`,
which runs a group as one group of the run (:class:`~stagewise.runs.groups.GroupContext`).
The members and their data are :mod:`.ensemble`'s; which groups an experiment trains is
:mod:`.experiments`'.

Step t (1-based) uses the learning rate ``lr`` of step t; step 0 is the initialization.
Metrics logged at step t describe the weights after t updates.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd
import torch

from ...engine import BatchedOptimizer, pack, resolve_device, schedules, unpack
from ...engine.driver import StepOutput, TrainingDriver
from ...engine.perf import training_threads
from ...measure import truncate_svd
from ...runs.groups import GroupContext
from ...runs.stops import Interrupted
from ..contract import RunContext
from .claims import control_of
from .config import Config
from .data import STREAMS
# DATA_FIELDS, data_layout, data_spec, members_from_config: re-exported for the modules that import them from here
# (floors, resources, lab, reference, theory, tests/engine/test_driver.py, benchmarks)
from .ensemble import (  # noqa: F401
    DATA_FIELDS, Ensemble, Member, build_ensemble, data_layout, data_spec, members_from_config,
)
from .metrics import block_matrices, evaluate, review_metrics, weight_metrics
from .model import forward, gradients


@dataclass(frozen=True)
class Group:
    """One batched training of a run: its config (shapes, model), its members (S) and how
    their records are named (:meth:`variant_of`; :mod:`.experiments` builds the groups)."""

    name: str
    config: Config
    members: list[Member]
    prefix_by_variant: bool = False
    prefix: str = ""

    def variant_of(self, member: Member) -> str:
        """The variant field of this member's records ("" for a single-variant run, "control"
        for its shuffled-label control; group prefixes go first)."""
        if self.prefix_by_variant:
            base = member.variant
        else:  # a cell's own members, and its ablation twins as "CELL|no-anneal"
            cell = self.prefix.rstrip("/")
            base = cell if member.variant == "baseline" else f"{cell}|{member.variant}" if cell else member.variant
        return control_of(base) if member.control else base


def learning_rate(config: Config, hyper: Mapping[str, torch.Tensor], step: int) -> torch.Tensor:
    """Per-member learning rate ``lr`` of update ``step`` (1-based), (S,): ``train.schedule``
    on :mod:`stagewise.engine.schedules` with each member's ``lr_stage1``, ``lr_stage2``, ``t1``.

    step: lr_stage1 up to t1, then lr_stage2 (``two_stage``); constant: lr_stage1; cosine:
    lr_stage1 -> lr_stage2 over ``train.steps`` (t1 unused); warmup: 0 -> lr_stage1 over
    ``train.warmup_steps`` (``linear_warmup``), then the step schedule.
    """
    tc = config.train
    lr_stage1, lr_stage2 = hyper["lr_stage1"], hyper["lr_stage2"]
    if tc.schedule == "constant":
        return schedules.constant(step, lr_stage1)
    if tc.schedule == "cosine":
        return schedules.cosine(step, tc.steps, lr_stage1, lr_stage2)
    if tc.schedule == "warmup" and step <= tc.warmup_steps:
        return schedules.linear_warmup(step, tc.warmup_steps, lr_stage1)
    return schedules.two_stage(step, lr_stage1, lr_stage2, hyper["t1"])


def noise_std(hyper: Mapping[str, torch.Tensor], lr: torch.Tensor, step: int) -> torch.Tensor:
    """Per-member update-noise std per entry at update ``step``, (S,): noise * lr, or
    noise * lr_stage1 ("constant"), or noise * lr until t1 and 0 after ("stage1"); times
    noise_stage2 after t1."""
    rate = torch.where(hyper["noise_constant"] > 0, hyper["lr_stage1"], lr)
    after = step > hyper["t1"]
    on = torch.where((hyper["noise_stage1"] > 0) & after, 0.0, 1.0)
    return hyper["noise"] * rate * on * torch.where(after, hyper["noise_stage2"], 1.0)


def init_weights(config: Config, members: list[Member], dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """(W, V) each (S, d, d), or (A,) (S, 2d, 2d) for full weights; i.i.d. N(0, sigma0^2)."""
    d = config.data.d
    shapes = [(2 * d, 2 * d)] if config.model.weights == "full" else [(d, d), (d, d)]
    out = []
    for k, shape in enumerate(shapes):
        draws = [torch.randn(shape, generator=STREAMS.torch(m.seed, "init", k), dtype=torch.float64) for m in members]
        out.append((config.model.init_scale * torch.stack(draws)).to(dtype))
    return tuple(out)


def _gaussian(rngs: list[torch.Generator], shape: tuple[int, ...], dtype: torch.dtype,
              device: torch.device | None = None) -> torch.Tensor:
    """One standard-normal draw per member from its own stream: (S, *shape)."""
    return torch.stack([torch.randn(shape, generator=g, dtype=torch.float64) for g in rngs]).to(device=device, dtype=dtype)


def _minibatch(ens: Ensemble) -> torch.Tensor:
    """(S, N) prompt weights of one SGD step: 1/B_i on B_i prompts drawn per member i
    (B_i = its batch size, at most N; B_i = N is full-batch GD)."""
    n = ens.config.data.n_train
    weight = torch.zeros(ens.size, n, dtype=ens.hyper["l2"].dtype)
    for i, (g, m) in enumerate(zip(ens.rngs["batch"], ens.members)):
        b = min(m.batch_size, n)
        weight[i, torch.randperm(n, generator=g)[:b]] = 1.0 / b
    return weight.to(ens.device)


@dataclass
class State:
    """Everything a checkpoint needs: weights, optimizer moments, RNG states, step."""

    weights: list[torch.Tensor]
    moments: dict[str, torch.Tensor] = field(default_factory=dict)
    step: int = 0

    def optimizer(self, tc) -> BatchedOptimizer:
        """The engine's optimizer over this state's moments (shared dict: updates land here)."""
        opt = BatchedOptimizer(tc.optimizer, tuple(tc.betas), tc.adam_eps, tc.weight_decay)
        opt.state = self.moments
        return opt

    def tensors(self, ens: Ensemble, prefix: str) -> dict[str, torch.Tensor]:
        """Checkpoint tensors (the engine's packing): ``{prefix}w.{i}``, ``{prefix}opt.{moment}``,
        ``{prefix}rng.{stream}`` (the members' generator states, stacked)."""
        rngs = {name: torch.stack([g.get_state() for g in gens]) for name, gens in ens.rngs.items()}
        return pack(**{f"{prefix}w": {str(i): w for i, w in enumerate(self.weights)}, f"{prefix}opt": self.moments,
                       f"{prefix}rng": rngs})

    @classmethod
    def restore(cls, tensors: dict[str, torch.Tensor], ens: Ensemble, prefix: str, step: int) -> "State":
        """The state saved by :meth:`tensors`, generators set back in place; on ``ens``'s device."""
        weights = unpack(tensors, f"{prefix}w", ens.device)
        for name, states in unpack(tensors, f"{prefix}rng").items():
            for g, st in zip(ens.rngs[name], states):
                g.set_state(st.clone())
        return cls([weights[str(i)] for i in range(len(weights))], unpack(tensors, f"{prefix}opt", ens.device), step)


def update(ens: Ensemble, state: State, step: int) -> None:
    """One optimizer step (update number ``step``) for every member: the gradient of the
    objective plus lambda w, the optimizer's step at each member's rate ``lr``, then the
    update noise N(0, :func:`noise_std`^2) per entry."""
    config, tc = ens.config, ens.config.train
    lr = learning_rate(config, ens.hyper, step)  # (S,)
    weight = _minibatch(ens) if tc.optimizer == "sgd" else None
    fwd = forward(tuple(state.weights), ens.train, config.model.output, config.model.normalizer)
    grads = gradients(fwd, ens.train, config.model.normalizer, weight, config.train.objective)
    l2 = ens.hyper["l2"].view(-1, 1, 1)
    names = [f"w{i}" for i in range(len(state.weights))]
    params = dict(zip(names, state.weights))
    full = {n: g + l2 * w for n, w, g in zip(names, state.weights, grads)}  # + gradient of (lambda/2)||w||^2
    state.optimizer(tc).step(params, full, names, lr)
    state.weights = [params[n] for n in names]
    if bool((ens.hyper["noise"] > 0).any()):
        # one draw per member and matrix, matrices in order (torch's normal sampler fills
        # blocks of 16, so one joint draw would not equal separate draws)
        scale = noise_std(ens.hyper, lr, step).view(-1, 1, 1)
        for i, w in enumerate(state.weights):
            state.weights[i] = w + scale * _gaussian(ens.rngs["noise"], tuple(w.shape[1:]), w.dtype, w.device)
    # a fixed layout: resumed runs (contiguous loads) must take the same kernels
    state.weights = [w.contiguous() for w in state.weights]


def run_training(ens: Ensemble, state: State, total: int, on_step: Callable[[int, State], None],
                 progress=None) -> State:
    """Updates state.step+1 .. total, calling ``on_step(t, state)`` after each (and at the
    start when state.step == 0), through the engine's step driver without a run context:
    nothing is logged, checked or saved (the lab's runs go through :func:`train_group`, which
    gives the driver its context)."""
    with training_threads(ens.config.thread_count(ens.size)):
        TrainingDriver(None, [m.seed for m in ens.members], total, lambda t: False, progress=progress) \
            .run(UpdateLoop(ens, state, on_step), start=state.step)
    return state


class UpdateLoop:
    """The updates of one ensemble behind the engine's :class:`~stagewise.engine.driver.Loop`:
    step t is :func:`update` number t, then ``on_step(t, state)`` (step 0: ``on_step`` only).
    Checkpoint tensors are :meth:`State.tensors` under ``prefix`` (e.g. ``"g0."`` per group).
    No metrics: :class:`GroupLoop` adds them (and ``after``, ``diverged``)."""

    def __init__(self, ens: Ensemble, state: State, on_step: Callable[[int, State], None] | None = None, prefix: str = ""):
        self.ens, self.current, self.on_step, self.prefix = ens, state, on_step, prefix

    def step(self, t: int, log: bool) -> StepOutput:
        if t > 0:
            update(self.ens, self.current, t)
            self.current.step = t
        if self.on_step is not None:
            self.on_step(t, self.current)
        return StepOutput()

    def weights(self) -> dict[str, torch.Tensor]:
        """The matrices, (S, d, d) each (W, V), or (S, 2d, 2d) (full weights)."""
        names = ("W", "V") if len(self.current.weights) == 2 else ("blockdiag(W, V)",)
        return dict(zip(names, self.current.weights))

    def state(self) -> dict[str, torch.Tensor]:
        return self.current.tensors(self.ens, self.prefix)

    def meta(self, t: int) -> dict[str, int]:
        return {"step": t}

    def restore(self, checkpoint: Any) -> int:
        self.current = State.restore(checkpoint.tensors, self.ens, self.prefix, checkpoint.step)
        return self.current.step

    def after(self, t: int) -> None:
        """Nothing after the record (subclasses add evaluations or tables)."""

    def diverged(self, t: int) -> Mapping[str, torch.Tensor] | None:
        """No record for a step with non-finite weights (subclasses evaluate it)."""
        return None


STAGE_COLUMNS = ("test.acc.p_only", "test.acc.q_only", "test.acc.both", "test.acc.p_part", "test.acc.q_part",
                 "test.acc.p_flipped", "test.acc", "test.K1", "test.K2",
                 "test.K1.p_queries", "test.K2.q_queries", "train.K1", "train.K2", "train.K1.p_queries",
                 "train.K2.q_queries", "W.fro", "V.fro", "W.spectral", "V.spectral", "W.signal", "V.signal.sv.0",
                 "V.signal.sv.1", "W.signal_share", "V.signal_share", "review.K1_ref", "review.K1_ref_at_norm",
                 "review.ref_scale")


STAGE_KEYS = ("group", "variant", "seed", "stage", "step")
EndTables = Callable[[Group, Callable[[], None]], Mapping[str, pd.DataFrame]] | None
"""Tables a group logs after its last step besides ``stages`` (name -> frame), or None. The
second argument, ``interrupt()``, raises :class:`~stagewise.runs.Interrupted` once a stop was
requested: a long end-of-run computation (the floors) calls it often and stops there."""


def _stage_rows(group: Group, stage: str, step: int, values: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    """Rows of the ``stages`` table at one stage end: one per member."""
    cols = {k: values[k].tolist() for k in STAGE_COLUMNS if k in values}
    return [{"group": group.name, "variant": group.variant_of(m), "seed": m.seed, "stage": stage, "step": step,
             **{k: v[i] for k, v in cols.items()}} for i, m in enumerate(group.members)]


def truncation_metrics(config: Config, ens: Ensemble, weights: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
    """Test accuracy (P-only, Q-only, both) of blockdiag(W, V) truncated to its top-k or
    bottom-k singular directions (the toy counterpart of the GPT-2 rank figure)."""
    d = config.data.d
    _, _, whole = block_matrices(weights, d)
    ks = config.experiment.truncation_ks or sorted({round(2 * d * i / 8) for i in range(9)})
    out = {}
    svd = torch.linalg.svd(whole.to(torch.float64))  # (S, 2d, 2d), (S, 2d), (S, 2d, 2d): once for every k
    for keep in ("top", "bottom"):
        for k in ks:
            cut = truncate_svd(svd, min(k, 2 * d), keep).to(whole.dtype)  # (S, 2d, 2d); in float64
            cut_weights = (cut,) if len(weights) == 1 else (cut[:, :d, :d], cut[:, d:, d:])
            m = evaluate(cut_weights, ens.test, ens.hyper["l2"], config.model.output, config.model.normalizer, d, "test")
            for kind in ("p_only", "q_only", "both"):
                out[f"truncate.{keep}.{k}.acc.{kind}"] = m[f"test.acc.{kind}"]
    return out


class GroupLoop(UpdateLoop):
    """One group's updates and measurements behind the driver's :class:`~stagewise.engine.driver.Loop`.

    Step t: :func:`update` number t, then (once the driver found the weights finite)
    the metrics of the weights after t updates: evaluations at logged steps (every
    ``log_every``, at 0, t1 and the end), weight metrics at those and every
    ``spectrum_every``, truncation and review metrics at the end. The ``stages`` table
    collects one row per member at t1 and at the end (a step whose losses then fail the
    finite check ends the run, so its rows are never saved) and is logged after the last
    step, before its checkpoint, followed by the tables of ``end_tables(group)`` (name ->
    frame: what the experiment adds, e.g. the floors). Checkpoint tensors are ``g{index}.*``
    (:meth:`State.tensors`), its record ``{"group", "step", "stage_rows"}``.
    """

    def __init__(self, index: int, group: Group, ens: Ensemble, ctx: RunContext, end_tables: EndTables = None):
        cfg = group.config
        weights = [w.to(ens.device) for w in init_weights(cfg, group.members, ens.hyper["l2"].dtype)]
        super().__init__(ens, State(weights), prefix=f"g{index}.")
        self.index, self.group, self.ctx, self.end_tables = index, group, ctx, end_tables
        self.total, self.marks = cfg.train.steps, {0, cfg.train.t1, cfg.train.steps}
        self.stage_rows: list[dict[str, Any]] = []

    def logged(self, t: int) -> bool:
        """Train and test metrics at step t: every ``log_every`` and at 0, t1 and the end."""
        return t % self.group.config.train.log_every == 0 or t in self.marks

    def step(self, t: int, log: bool) -> StepOutput:
        super().step(t, log)
        return StepOutput(deferred=lambda: self.measure(t, log))

    def stage(self, t: int) -> dict[str, torch.Tensor]:
        """The stage of step t (1.0 up to t1, then 2.0), (S,)."""
        t1, dtype = self.group.config.train.t1, self.ens.hyper["l2"].dtype
        return {"stage": torch.full((self.ens.size,), 1.0 if t <= t1 else 2.0, dtype=dtype, device=self.ens.device)}

    def evaluate_splits(self, weights: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
        """Loss, accuracies and K metrics on the training and the test prompts, each (S,)."""
        cfg, ens = self.group.config, self.ens
        out = {}
        for split, batch in (("train", ens.train), ("test", ens.test)):
            out.update(evaluate(weights, batch, ens.hyper["l2"], cfg.model.output, cfg.model.normalizer, cfg.data.d, split))
        return out

    def measure(self, t: int, log: bool) -> StepOutput:
        """Step t's values (None when neither logged nor a spectrum step); losses checked when logged."""
        cfg, ens = self.group.config, self.ens
        spectra = t % cfg.train.spectrum_every == 0 or t in self.marks
        if not (log or spectra):
            return StepOutput()
        weights = tuple(self.current.weights)
        assert ens.w_star is not None and ens.zeta_basis is not None  # set by build_ensemble
        values = {**self.stage(t), **weight_metrics(weights, cfg.data.d, spectra, ens.w_star, ens.zeta_basis)}
        if log:
            values.update(self.evaluate_splits(weights))
        if t == self.total:
            values.update(truncation_metrics(cfg, ens, weights))
            values.update(review_metrics(weights, ens.w_star, ens.test, cfg.model.normalizer, cfg.data.d))
        for name, mark in (("stage1", cfg.train.t1), ("stage2", self.total)):
            if t == mark and log:
                self.stage_rows.extend(_stage_rows(self.group, name, t, values))
        return StepOutput(values, {k: values[k] for k in ("train.loss", "test.loss")} if log else None)

    def diverged(self, t: int) -> dict[str, torch.Tensor]:
        """The record of a step whose weights are not finite: its stage and evaluations."""
        return {**self.stage(t), **self.evaluate_splits(tuple(self.current.weights))}

    def after(self, t: int) -> None:
        """After the last step (the group's table part complete): the ``stages`` table."""
        if t == self.total:
            frame = pd.DataFrame(self.stage_rows)
            self.ctx.log_table("stages", frame[[c for c in STAGE_KEYS + STAGE_COLUMNS if c in frame]], part=self.group.name)
            for name, table in (self.end_tables(self.group, self.interrupt) if self.end_tables is not None else {}).items():
                self.ctx.log_table(name, table, part=self.group.name)

    def interrupt(self) -> None:
        """Raise :class:`~stagewise.runs.Interrupted` if SIGINT/SIGTERM asked the run to stop. The
        end-of-run tables (the floors: minutes at some sizes) run after the last step, where no
        next step would take the stop request, so they call this between their iterations: the
        run stops there with status interrupted, and a resume goes on from its last checkpoint
        (the last step and the tables are computed again)."""
        if self.ctx.stop_requested():
            raise Interrupted(getattr(self.ctx, "stop_signal", None) or signal.SIGINT)

    def meta(self, t: int) -> dict[str, Any]:
        return {"group": self.index, "step": t, "stage_rows": self.stage_rows}

    def restore(self, checkpoint: Any) -> int:
        """The checkpoint's state and the table rows collected before it."""
        step = super().restore(checkpoint)
        self.stage_rows = list(checkpoint.meta.get("stage_rows", []))
        return step


def train_group(index: int, group: Group, ctx: RunContext, end_tables: EndTables = None) -> None:
    """Train group number ``index`` of the run with logging and checkpoints through the
    engine's :class:`~stagewise.engine.driver.TrainingDriver`, as one group of the run: a
    :class:`~stagewise.runs.groups.GroupContext` splits the (S,) member records into one per
    variant, saves the checkpoints with the group's index and resumes from the run's checkpoint
    when it is this group's. Weights are checked at every step (a diverged step's evaluation
    is logged before raising), losses at logged steps; a checkpoint at
    ``ctx.should_checkpoint(t)`` and at the last step. ``end_tables``: see :class:`GroupLoop`."""
    cfg = group.config
    ens = build_ensemble(cfg, group.members).to(resolve_device(cfg.device))  # prompts drawn on the CPU streams, then moved
    loop = GroupLoop(index, group, ens, ctx, end_tables)
    records = GroupContext(ctx, index, [group.variant_of(m) for m in group.members])
    driver = TrainingDriver(records, [m.seed for m in group.members], cfg.train.steps, loop.logged, group.name,
                            weights_every_step=True)
    with training_threads(cfg.thread_count(ens.size)):
        driver.run(loop)
