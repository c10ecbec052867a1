"""The experiments of the disentangled lab as *groups* of batched trainings.

A group is one batched computation (members = seeds x shape-keeping variants). When an
experiment has several variants (ablations, grid) or groups (d-scaling: ``d={d}``), each
metric record carries its variant (the run store's ``variant`` field; metric names read
``{variant}/{name}``). Groups run one after another; checkpoints carry the group index as
their own field, so a killed run resumes inside the right group.

Each group also logs the table ``stages``: one row per (variant, seed) with the test
accuracies and branch losses at the end of each stage (t1 and the last step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd
import torch

from ...config import deep_merge, validate
from ...measure import truncate
from ...engine import check_finite, find_nonfinite, resolve_device
from ...runs import Checkpoint
from ..contract import RunContext
from .claims import control_of
from .config import Config
from .metrics import block_matrices, evaluate, review_metrics, weight_metrics
from .train import Member, State, build_ensemble, init_weights, members_from_config, run_training

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
        base = member.variant if self.prefix_by_variant else self.prefix.rstrip("/")
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
    return {
        "no-anneal": ({"eta2": tc.eta1}, {}),
        "small-lr": ({"eta1": tc.eta2}, {}),
        "no-noise": ({"noise": 0.0}, {}),
        "no-l2": ({"l2": 0.0}, {}),
        "mixture-off": ({"p0": 0.0, "q0": 0.0}, {}),
        "joint": ({}, {"model": {"output": "joint"}}),
        "full": ({}, {"model": {"weights": "full"}}),
        "anneal-fixed-noise": ({"noise_mode": "constant"}, {}),
        "noise-off-t1": ({"eta2": tc.eta1, "noise_mode": "stage1"}, {}),
    }[name]


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
    if kind == "robustness":
        return [Group(name, cfg, with_control(cfg, members_from_config(cfg)), prefix=f"{name}/")
                for name, cfg in robustness_configs(config)]
    if kind == "d-scaling":
        return [Group(f"d={d}", cfg := scaled_config(config, d), members_from_config(cfg), prefix=f"d={d}/")
                for d in config.experiment.dims]
    # shape-keeping ablations that share the baseline's data: one batched group, seed-major
    # (each seed's dataset once, K variants over it); the rest: one group each
    shared, separate = ["baseline"], []
    overrides = {"baseline": {}}
    for name in config.experiment.ablations:
        member_over, config_over = _variant(config, name)
        if config_over or "p0" in member_over:
            cfg = validate(Config, deep_merge(config.model_dump(mode="json"), config_over))
            separate.append(Group(name, cfg, members_from_config(cfg, name, **member_over), prefix_by_variant=True))
        else:
            shared.append(name)
            overrides[name] = member_over
    batched = seed_major(config, {v: overrides[v] for v in shared})
    controls = with_control(config, members_from_config(config))[config.n_seeds:]  # the baseline's only
    return [Group("batched", config, batched + controls, prefix_by_variant=True)] + separate


def seed_major(config: Config, variants: dict[str, dict[str, Any]]) -> list[Member]:
    """Members for every (seed, variant), seed-major, so each seed's data is stored once and
    its K variants are contracted in one pass."""
    per_variant = {name: members_from_config(config, name, **over) for name, over in variants.items()}
    return [per_variant[name][i] for i in range(config.n_seeds) for name in variants]


def grid_variants(config: Config) -> dict[str, dict[str, float]]:
    """Name -> overrides of every combination in ``experiment.grid`` (e.g. "lr_stage1=1,noise=0.05")."""
    from itertools import product

    keys = list(config.experiment.grid)
    out = {}
    for values in product(*(config.experiment.grid[k] for k in keys)):
        over = {k: (int(v) if k in INTEGER_AXES else float(v)) for k, v in zip(keys, values)}
        out[",".join(f"{k}={v:g}" for k, v in over.items())] = over
    return out


INTEGER_AXES = ("t1", "batch_size")


def _log_rows(ctx, group: Group, step: int, values: dict[str, torch.Tensor]) -> None:
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


def truncation_metrics(config: Config, ens, weights: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
    """Test accuracy (P-only, Q-only, both) of blockdiag(W, V) truncated to its top-k or
    bottom-k singular directions (the toy counterpart of the GPT-2 rank figure)."""
    d = config.data.d
    _, _, whole = block_matrices(weights, d)
    ks = config.experiment.truncation_ks or sorted({round(2 * d * i / 8) for i in range(9)})
    out = {}
    for keep in ("top", "bottom"):
        for k in ks:
            cut = truncate(whole, min(k, 2 * d), keep)  # (M, 2d, 2d)
            cut_weights = (cut,) if len(weights) == 1 else (cut[:, :d, :d], cut[:, d:, d:])
            m = evaluate(cut_weights, ens.test, ens.hyper["l2"], config.model.output, config.model.normalizer, d, "test")
            for kind in ("p_only", "q_only", "both"):
                out[f"truncate.{keep}.{k}.acc.{kind}"] = m[f"test.acc.{kind}"]
    return out


def run_group(index: int, group: Group, ctx: RunContext, resume: Checkpoint | None) -> None:
    """Train one group with logging and checkpoints (resuming when ``resume`` is given)."""
    cfg, tc = group.config, group.config.train
    device = resolve_device(cfg.device)
    ens = build_ensemble(cfg, group.members).to(device)  # prompts drawn on the CPU streams, then moved
    dtype = ens.hyper["l2"].dtype
    prefix = f"g{index}."
    if resume is not None:
        state = State.restore(resume.tensors, ens, prefix, resume.step)
    else:
        state = State([w.to(device) for w in init_weights(cfg, group.members, dtype)])
    total, marks = tc.steps, {0, tc.t1, tc.steps}
    seeds = [m.seed for m in group.members]

    def evaluate_splits(weights: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
        out = {}
        for split, batch in (("train", ens.train), ("test", ens.test)):
            out.update(evaluate(weights, batch, ens.hyper["l2"], cfg.model.output, cfg.model.normalizer, cfg.data.d, split))
        return out

    stage_rows: list[dict[str, Any]] = []

    def on_step(t: int, st: State) -> None:
        weights = tuple(st.weights)
        stage = {"stage": torch.full((ens.size,), 1.0 if t <= tc.t1 else 2.0, dtype=dtype, device=device)}
        named = dict(zip(("W", "V") if len(weights) == 2 else ("blockdiag(W, V)",), weights))
        broken = find_nonfinite(t, seeds, None, named)  # every step: one reduction per matrix, one sync
        if broken is not None:
            _log_rows(ctx, group, t, {**stage, **evaluate_splits(weights)})
            raise broken
        log = t % tc.log_every == 0 or t in marks
        spectra = t % tc.spectrum_every == 0 or t in marks
        if log or spectra:
            values = {**stage, **weight_metrics(weights, cfg.data.d, spectra, ens.w_star, ens.zeta_basis)}
            if log:
                values.update(evaluate_splits(weights))
            if t == total:
                values.update(truncation_metrics(cfg, ens, weights))
                values.update(review_metrics(weights, ens.w_star, ens.test, cfg.model.normalizer, cfg.data.d))
            _log_rows(ctx, group, t, values)
            if log:
                check_finite(t, seeds, {k: values[k] for k in ("train.loss", "test.loss")})
            for name, mark in (("stage1", tc.t1), ("stage2", total)):
                if t == mark and log:
                    stage_rows.extend(_stage_rows(group, name, t, values))
        if t > 0 and (ctx.should_checkpoint(t) or t == total):
            if t == total:  # the table part of this group is complete: log it before the final checkpoint
                frame = pd.DataFrame(stage_rows)
                ctx.log_table("stages", frame[[c for c in STAGE_KEYS + STAGE_COLUMNS if c in frame]], part=group.name)
            ctx.save_checkpoint(t, st.tensors(ens, prefix), {"group": index, "step": t, "stage_rows": stage_rows},
                                group=index)

    if resume is not None:  # rows collected before the checkpoint
        stage_rows.extend(resume.meta.get("stage_rows", []))
    run_training(ens, state, total, on_step, ctx.progress(total, group.name, start=state.step))
