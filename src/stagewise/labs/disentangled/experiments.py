"""The experiments of the disentangled lab: which groups of batched trainings each one trains.

A group is one batched computation (members = seeds x shape-keeping variants,
:class:`~.train.Group`); how a group trains is :mod:`.train`'s. When an experiment has several
variants (ablations, grid) or groups (d-scaling: ``d={d}``), each metric record carries its
variant (the run store's ``variant`` field; metric names read ``{variant}/{name}``). Groups
run one after another (:func:`run_experiment`, on :func:`stagewise.runs.groups.run_groups`);
checkpoints carry the group index as their own field, so a killed run resumes inside the
right group. Each group also logs the table ``stages``: one row per (variant, seed) with the
test accuracies and branch losses at the end of each stage (t1 and the last step).

Top to bottom: the ablations (:data:`ABLATIONS`), the configs of d-scaling and robustness,
:func:`groups` (each kind's groups), the member orders and the grid, the tables a group adds
after training (the floors), :func:`run_experiment`.
"""

from __future__ import annotations

import math
from dataclasses import replace
from itertools import product
from typing import Any, Callable

import pandas as pd

from ...config import deep_merge, validate
from ...runs.groups import run_groups
from ..contract import RunContext
from .config import Config
from .ensemble import Member, data_major, members_from_config
from .train import Group, train_group


def with_control(config: Config, members: list[Member]) -> list[Member]:
    """``members`` followed by their shuffled-label controls (same seeds and settings, the
    training targets permuted) when ``experiment.control`` is on."""
    if not config.experiment.control:
        return members
    return members + [replace(m, control=True) for m in members]


Overrides = tuple[dict[str, Any], dict[str, Any]]
"""(member overrides: :class:`~.ensemble.Member` fields, config overrides) of an ablation."""

ABLATIONS: dict[str, Callable[[Config], Overrides]] = {
    "no-anneal": lambda c: ({"lr_stage2": c.train.lr_stage1, "noise_stage2": 1.0}, {}),  # no annealing of rate or noise
    "small-lr": lambda c: ({"lr_stage1": c.train.lr_stage2}, {}),
    "no-noise": lambda c: ({"noise": 0.0}, {}),
    "no-l2": lambda c: ({"l2": 0.0}, {}),
    "mixture-off": lambda c: ({"p0": 0.0, "q0": 0.0}, {}),
    "joint": lambda c: ({}, {"model": {"output": "joint"}}),
    "full": lambda c: ({}, {"model": {"weights": "full"}}),
    "anneal-fixed-noise": lambda c: ({"noise_mode": "constant"}, {}),
    "noise-off-t1": lambda c: ({"lr_stage2": c.train.lr_stage1, "noise_mode": "stage1"}, {}),
}
"""Ablation name -> its (member overrides, config overrides) under a config."""


def scaled_config(config: Config, d: int) -> Config:
    """The d-scaling rules, anchored at the base config's d [reconstructed]:
    1/lambda ~ sqrt(log d), L ~ sqrt(d) log d (the assumptions' orders); lr_stage1, lr_stage2
    and t1 kept (no rule for them is known to us)."""
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
    """The groups of ``config``'s experiment, in training order: one (two-stage, spectral,
    grid: every combination batched), one per (d, seed block) cell (robustness) or d
    (d-scaling), or the shape-keeping ablations batched with the baseline and one group per
    ablation that changes shapes or data (ablations)."""
    kind = config.experiment.kind
    if kind in ("two-stage", "spectral"):
        return [Group("baseline", config, with_control(config, members_from_config(config)))]
    if kind == "grid":
        return [Group("grid", config, with_control(config, seed_major(config, grid_variants(config))), prefix_by_variant=True)]
    if kind == "robustness":  # each cell with its no-anneal twin (the causal accuracy claim) when the ablations name it
        twins: dict[str, dict[str, Any]] = {"baseline": {}}
        if "no-anneal" in config.experiment.ablations:
            twins["no-anneal"] = ABLATIONS["no-anneal"](config)[0]
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
        member_over, config_over = ABLATIONS[name](config)
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
    # data-major: a seed's variants and their controls are consecutive, so ensemble.data_layout stores each seed's
    # prompts once for all of them (a control permutes only its targets)
    return [Group("batched", config, data_major(batched + controls), prefix_by_variant=True)] + separate


def seed_major(config: Config, variants: dict[str, dict[str, Any]]) -> list[Member]:
    """Members for every (seed, variant), seed-major, so each seed's data is stored once and
    its K variants are contracted in one pass."""
    per_variant = {name: members_from_config(config, name, **over) for name, over in variants.items()}
    return [per_variant[name][i] for i in range(config.n_seeds) for name in variants]


def grid_variants(config: Config) -> dict[str, dict[str, Any]]:
    """Name -> overrides of every combination in ``experiment.grid`` (e.g. "lr_stage1=1,noise=0.05")."""
    keys = list(config.experiment.grid)
    out: dict[str, dict[str, Any]] = {}
    for values in product(*(config.experiment.grid[k] for k in keys)):
        over: dict[str, Any] = {k: (int(v) if k in INTEGER_AXES else float(v)) for k, v in zip(keys, values)}
        out[",".join(f"{k}={v:g}" for k, v in over.items())] = over
    return out


INTEGER_AXES = ("t1", "batch_size")


def floor_tables(group: Group, interrupt: Callable[[], None] | None = None) -> dict[str, pd.DataFrame]:
    """The attainable floors of the group's members (:func:`.floor_tables.floor_tables`: ``floors``, one
    row per member, and ``floor_starts``, one per member and start; identical problems solved
    once) under the run store's variant names; ``interrupt()`` is called between Newton iterations."""
    from .floor_tables import floor_tables as solve_floors

    tables = solve_floors(group.config, group.members, interrupt)
    return tables.frames(group.name, [group.variant_of(m) for m in group.members])


def end_tables(group: Group, interrupt: Callable[[], None] | None = None) -> dict[str, pd.DataFrame]:
    """The tables a group logs after its last step besides ``stages``: ``floors`` and
    ``floor_starts`` when ``experiment.floors`` is on (a stop request ends them at the next
    Newton iteration through ``interrupt``)."""
    return floor_tables(group, interrupt) if group.config.experiment.floors else {}


def run_experiment(config: Config, ctx: RunContext) -> list[Group]:
    """Train every group of ``config``'s experiment in order (:func:`~.train.train_group`),
    skipping those a resumed run had finished; returns the groups."""
    plan = groups(config)
    run_groups(ctx, plan, lambda index, group: train_group(index, group, ctx, end_tables))
    return plan
