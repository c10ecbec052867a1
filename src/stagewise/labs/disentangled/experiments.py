"""The experiments of the disentangled lab as *groups* of batched trainings.

A group is one batched computation (members = seeds x shape-keeping variants). When an
experiment has several variants (ablations, grid) or groups (d-scaling: ``d={d}``), each
metric record carries its variant (the run store's ``variant`` field; metric names read
``{variant}/{name}``). Groups run one after another; checkpoints carry the group index as
their own field, so a killed run resumes inside the right group.

Each group also logs the table ``stages``: one row per (variant, seed) with the test
accuracies and branch losses at the end of each stage (t1 and the last step).

A group trains on the engine's :class:`~stagewise.engine.driver.TrainingDriver` (the lab
supplies :class:`GroupLoop`, the updates and measurements, and :class:`GroupContext`, the
per-variant records and the group's checkpoints); the driver does the resume hand-off,
logging cadence, finite checks, checkpoints and stop requests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd
import torch

from ...config import deep_merge, validate
from ...measure import truncate_svd
from ...engine import resolve_device
from ...engine.driver import StepOutput, TrainingDriver
from ...engine.perf import training_threads
from ...runs import Checkpoint
from ..contract import RunContext
from .claims import control_of
from .config import Config
from .metrics import block_matrices, evaluate, review_metrics, weight_metrics
from .train import Ensemble, Member, State, UpdateLoop, build_ensemble, data_major, init_weights, members_from_config


@dataclass(frozen=True)
class Group:
    """One batched training: its config (shapes, model), members and name prefixing."""

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


def with_control(config: Config, members: list[Member]) -> list[Member]:
    """``members`` followed by their shuffled-label controls (same seeds and settings, the
    training targets permuted) when ``experiment.control`` is on."""
    if not config.experiment.control:
        return members
    return members + [replace(m, control=True) for m in members]


def _variant(config: Config, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(member overrides, config overrides) of an ablation."""
    tc = config.train
    table: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
        "no-anneal": ({"eta2": tc.eta1}, {}),
        "small-lr": ({"eta1": tc.eta2}, {}),
        "no-noise": ({"noise": 0.0}, {}),
        "no-l2": ({"l2": 0.0}, {}),
        "mixture-off": ({"p0": 0.0, "q0": 0.0}, {}),
        "joint": ({}, {"model": {"output": "joint"}}),
        "full": ({}, {"model": {"weights": "full"}}),
        "anneal-fixed-noise": ({"noise_mode": "constant"}, {}),
        "noise-off-t1": ({"eta2": tc.eta1, "noise_mode": "stage1"}, {}),
    }
    return table[name]


def scaled_config(config: Config, d: int) -> Config:
    """The d-scaling rules, anchored at the base config's d [reconstructed]:
    1/lambda ~ sqrt(log d), L ~ sqrt(d) log d (the assumptions' orders); eta1, eta2 and t1
    kept (no rule for them is known to us)."""
    d0 = config.data.d
    changes: dict[str, Any] = {"data": {"d": d}}
    if config.experiment.scale_rules:
        grow = (math.sqrt(d) * math.log(d)) / (math.sqrt(d0) * math.log(d0))
        changes["data"]["prompt_len"] = max(2, round(config.data.prompt_len * grow))
        changes["train"] = {"l2": config.train.l2 * math.sqrt(math.log(d0) / math.log(d))}
    return validate(Config, deep_merge(config.model_dump(mode="json"), changes))


def robustness_configs(config: Config) -> list[tuple[str, Config]]:
    """(name, config) of every (d, seed block) of kind=robustness: the base config with d
    and the first seed changed, nothing else ("d=20,seed=1000")."""
    out = []
    for d in config.experiment.dims:
        for block in config.experiment.seed_blocks:
            cfg = validate(Config, deep_merge(config.model_dump(mode="json"), {"data": {"d": d}, "seed": block}))
            out.append((f"d={d},seed={block}", cfg))
    return out


def groups(config: Config) -> list[Group]:
    kind = config.experiment.kind
    if kind in ("two-stage", "spectral"):
        return [Group("baseline", config, with_control(config, members_from_config(config)))]
    if kind == "grid":
        return [Group("grid", config, with_control(config, seed_major(config, grid_variants(config))), prefix_by_variant=True)]
    if kind == "robustness":  # each cell with its no-anneal twin (the causal accuracy claim) when the ablations name it
        twins: dict[str, dict[str, Any]] = {"baseline": {}}
        if "no-anneal" in config.experiment.ablations:
            twins["no-anneal"] = _variant(config, "no-anneal")[0]
        return [Group(name, cfg, with_control(cfg, seed_major(cfg, twins)), prefix=f"{name}/")
                for name, cfg in robustness_configs(config)]
    if kind == "d-scaling":
        return [Group(f"d={d}", cfg := scaled_config(config, d), members_from_config(cfg), prefix=f"d={d}/")
                for d in config.experiment.dims]
    # shape-keeping ablations that share the baseline's data: one batched group, seed-major
    # (each seed's dataset once, K variants over it); the rest: one group each
    shared, separate = ["baseline"], []
    overrides: dict[str, dict[str, Any]] = {"baseline": {}}
    for name in config.experiment.ablations:
        member_over, config_over = _variant(config, name)
        if config_over or "p0" in member_over:
            cfg = validate(Config, deep_merge(config.model_dump(mode="json"), config_over))
            separate.append(Group(name, cfg, members_from_config(cfg, name, **member_over), prefix_by_variant=True))
        else:
            shared.append(name)
            overrides[name] = member_over
    batched = seed_major(config, {v: overrides[v] for v in shared})
    # the baseline's control (the null of every variant) and, for the causal accuracy claim, the no-anneal twin's
    nulls: dict[str, dict[str, Any]] = {v: overrides[v] for v in ("baseline", "no-anneal") if v in shared}
    controls = [replace(m, control=True) for m in seed_major(config, nulls)] if config.experiment.control else []
    # data-major: a seed's variants and their controls are consecutive, so train.data_layout stores each seed's
    # prompts once for all of them (a control permutes only its targets)
    return [Group("batched", config, data_major(batched + controls), prefix_by_variant=True)] + separate


def seed_major(config: Config, variants: dict[str, dict[str, Any]]) -> list[Member]:
    """Members for every (seed, variant), seed-major, so each seed's data is stored once and
    its K variants are contracted in one pass."""
    per_variant = {name: members_from_config(config, name, **over) for name, over in variants.items()}
    return [per_variant[name][i] for i in range(config.n_seeds) for name in variants]


def grid_variants(config: Config) -> dict[str, dict[str, Any]]:
    """Name -> overrides of every combination in ``experiment.grid`` (e.g. "lr_stage1=1,noise=0.05")."""
    from itertools import product

    keys = list(config.experiment.grid)
    out: dict[str, dict[str, Any]] = {}
    for values in product(*(config.experiment.grid[k] for k in keys)):
        over: dict[str, Any] = {k: (int(v) if k in INTEGER_AXES else float(v)) for k, v in zip(keys, values)}
        out[",".join(f"{k}={v:g}" for k, v in over.items())] = over
    return out


INTEGER_AXES = ("t1", "batch_size")


def _log_rows(ctx: RunContext, group: Group, step: int, values: Mapping[str, torch.Tensor]) -> None:
    """Log (M,) member vectors as one record of (n_seeds,) vectors per variant."""
    variants: dict[str, list[int]] = {}
    for i, m in enumerate(group.members):
        variants.setdefault(group.variant_of(m), []).append(i)
    names = list(values)
    stacked = torch.stack([values[n] for n in names])  # (K, M)
    for variant, idx in variants.items():
        block = stacked[:, torch.tensor(idx)]  # (K, n_seeds)
        ctx.log(step, dict(zip(names, block.unbind(0))), variant=variant)


STAGE_COLUMNS = ("test.acc.p_only", "test.acc.q_only", "test.acc.both", "test.acc.p_part", "test.acc.q_part",
                 "test.acc.p_flipped", "test.acc", "test.K1", "test.K2",
                 "test.K1.p_queries", "test.K2.q_queries", "train.K1", "train.K2", "train.K1.p_queries",
                 "train.K2.q_queries", "W.fro", "V.fro", "W.spectral", "V.spectral", "W.signal", "V.signal.sv.0",
                 "V.signal.sv.1", "W.signal_share", "V.signal_share", "review.K1_ref", "review.K1_ref_at_norm",
                 "review.ref_scale")


STAGE_KEYS = ("group", "variant", "seed", "stage", "step")


def _stage_rows(group: Group, stage: str, step: int, values: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    """Rows of the ``stages`` table at one stage end: one per member."""
    cols = {k: values[k].tolist() for k in STAGE_COLUMNS if k in values}
    return [{"group": group.name, "variant": group.variant_of(m), "seed": m.seed, "stage": stage, "step": step,
             **{k: v[i] for k, v in cols.items()}} for i, m in enumerate(group.members)]


def floor_table(group: Group) -> pd.DataFrame:
    """The attainable floors of the group's members (:func:`.floors.floor_rows`, one row per
    member, identical problems solved once) under the run store's variant names."""
    from .floors import floor_rows

    rows = floor_rows(group.config, group.members)
    frame = pd.DataFrame(rows)
    frame["variant"] = [group.variant_of(m) for m in group.members]
    frame.insert(0, "group", group.name)
    return frame


def truncation_metrics(config: Config, ens, weights: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
    """Test accuracy (P-only, Q-only, both) of blockdiag(W, V) truncated to its top-k or
    bottom-k singular directions (the toy counterpart of the GPT-2 rank figure)."""
    d = config.data.d
    _, _, whole = block_matrices(weights, d)
    ks = config.experiment.truncation_ks or sorted({round(2 * d * i / 8) for i in range(9)})
    out = {}
    svd = torch.linalg.svd(whole.to(torch.float64))  # (M, 2d, 2d), (M, 2d), (M, 2d, 2d): once for every k
    for keep in ("top", "bottom"):
        for k in ks:
            cut = truncate_svd(svd, min(k, 2 * d), keep).to(whole.dtype)  # (M, 2d, 2d); in float64
            cut_weights = (cut,) if len(weights) == 1 else (cut[:, :d, :d], cut[:, d:, d:])
            m = evaluate(cut_weights, ens.test, ens.hyper["l2"], config.model.output, config.model.normalizer, d, "test")
            for kind in ("p_only", "q_only", "both"):
                out[f"truncate.{keep}.{k}.acc.{kind}"] = m[f"test.acc.{kind}"]
    return out


class GroupContext:
    """The run context one group's :class:`~stagewise.engine.driver.TrainingDriver` sees:
    records go through :func:`_log_rows` ((M,) member vectors -> one record of (n_seeds,)
    vectors per variant), checkpoints carry the group's index as ``group``, the resumed
    checkpoint is the one handed to this group (None: a fresh start); the rest is ``ctx``'s."""

    def __init__(self, ctx: RunContext, group: Group, index: int, resume: Checkpoint | None):
        self._ctx, self.group, self.index, self.resume = ctx, group, index, resume

    def log(self, step: int, values: Mapping[str, torch.Tensor], *, variant: str = "") -> None:
        _log_rows(self._ctx, self.group, step, values)

    def save_checkpoint(self, step: int, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any] | None = None,
                        *, group: int = 0) -> None:
        self._ctx.save_checkpoint(step, tensors, meta, group=self.index)

    def resume_state(self) -> Checkpoint | None:
        return self.resume

    def __getattr__(self, attr: str) -> Any:  # progress, should_checkpoint, stop_requested, log_table ...
        return getattr(self._ctx, attr)


class GroupLoop(UpdateLoop):
    """One group's updates and measurements behind the driver's :class:`~stagewise.engine.driver.Loop`.

    Step t: :func:`.train.update` number t, then (once the driver found the weights finite)
    the metrics of the weights after t updates: evaluations at logged steps (every
    ``log_every``, at 0, t1 and the end), weight metrics at those and every
    ``spectrum_every``, truncation and review metrics at the end. The ``stages`` table
    collects one row per member at t1 and at the end (a step whose losses then fail the
    finite check ends the run, so its rows are never saved) and is logged after the last
    step, before its checkpoint. Checkpoint tensors are ``g{index}.*``
    (:meth:`.train.State.tensors`), its record ``{"group", "step", "stage_rows"}``.
    """

    def __init__(self, index: int, group: Group, ens: Ensemble, ctx: RunContext):
        cfg = group.config
        weights = [w.to(ens.device) for w in init_weights(cfg, group.members, ens.hyper["l2"].dtype)]
        super().__init__(ens, State(weights), prefix=f"g{index}.")
        self.index, self.group, self.ctx = index, group, ctx
        self.total, self.marks = cfg.train.steps, {0, cfg.train.t1, cfg.train.steps}
        self.stage_rows: list[dict[str, Any]] = []

    def logged(self, t: int) -> bool:
        """Train and test metrics at step t: every ``log_every`` and at 0, t1 and the end."""
        return t % self.group.config.train.log_every == 0 or t in self.marks

    def step(self, t: int, log: bool) -> StepOutput:
        super().step(t, log)
        return StepOutput(deferred=lambda: self.measure(t, log))

    def stage(self, t: int) -> dict[str, torch.Tensor]:
        """The stage of step t (1.0 up to t1, then 2.0), (M,)."""
        t1, dtype = self.group.config.train.t1, self.ens.hyper["l2"].dtype
        return {"stage": torch.full((self.ens.size,), 1.0 if t <= t1 else 2.0, dtype=dtype, device=self.ens.device)}

    def evaluate_splits(self, weights: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
        """Loss, accuracies and K metrics on the training and the test prompts, each (M,)."""
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
            if self.group.config.experiment.floors:
                self.ctx.log_table("floors", floor_table(self.group), part=self.group.name)

    def meta(self, t: int) -> dict[str, Any]:
        return {"group": self.index, "step": t, "stage_rows": self.stage_rows}

    def restore(self, checkpoint: Any) -> int:
        """The checkpoint's state and the table rows collected before it."""
        step = super().restore(checkpoint)
        self.stage_rows = list(checkpoint.meta.get("stage_rows", []))
        return step


def run_group(index: int, group: Group, ctx: RunContext, resume: Checkpoint | None) -> None:
    """Train one group with logging and checkpoints (resuming when ``resume`` is given)
    through the engine's :class:`~stagewise.engine.driver.TrainingDriver`: weights checked
    at every step (a diverged step's evaluation is logged before raising), losses at logged
    steps, a checkpoint at ``ctx.should_checkpoint(t)`` and at the last step."""
    cfg = group.config
    ens = build_ensemble(cfg, group.members).to(resolve_device(cfg.device))  # prompts drawn on the CPU streams, then moved
    loop = GroupLoop(index, group, ens, ctx)
    driver = TrainingDriver(GroupContext(ctx, group, index, resume), [m.seed for m in group.members], cfg.train.steps,
                            loop.logged, group.name, weights_every_step=True)
    with training_threads(cfg.thread_count(ens.size)):
        driver.run(loop)
