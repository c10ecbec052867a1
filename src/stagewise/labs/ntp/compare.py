"""The comparison experiment (``compare``): two-stage normalized GD against joint training,
Adam and AdamW, on the same data, embeddings and seeds (reviewers: "why two stages?",
"AdamW is what people use").

Each variant is one batched training of the same :class:`~.problem.Problem`, one group of
the run (:mod:`stagewise.runs.groups`): variants run one after another, their records carry
the run store's ``variant`` field (metric names ``{variant}/{name}``) and their checkpoints
the variant's index as ``group`` (and its name as ``variant``), so a killed run resumes
inside the right variant. Every variant gets the lab's own claims (ids prefixed
``{variant}/``), and the comparison claims (judged in :func:`.claims.compare_claims` on the
values :func:`variant_finals` reads here) test the theory's predictions, fixed before the runs
as strict per-seed inequalities at the last step (no tuned threshold):

* ``compare_wkq_two_stage_vs_joint``: two-stage ends closer to W_kq* (cos higher) than joint
  training, which the theory does not cover;
* ``compare_wov_two_stage_vs_joint``: the same for W_ov* (two-stage keeps W_ov exactly on
  W_ov*'s direction; joint training moves W_ov with the main loss);
* ``compare_wkq_ngd_vs_adam``: normalized GD ends closer to the l2 max-margin W_kq* than
  Adam and AdamW (sign-like updates follow a different implicit bias);
* ``compare_norm_adamw_below_adam``: weight decay keeps AdamW's ||W_kq|| below Adam's.

Loss, attention mass and norm growth have no theory prediction across variants; they are
reported per variant in ``details.compare``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...measure import values_at
from ...runs.groups import GroupContext, run_groups
from ...report.claims import Stats, Summary
from ..contract import RunContext, RunResult, Tables
from .claims import VariantFinals, compare_claims, horizon_claims, training_claims
from .config import Config
from .summary import FINAL_METRICS, rate_fits, stage_detection, summarize
from .problem import Problem
from .train import Params, train_two_stage

# variant -> train overrides (adamw keeps train.weight_decay, 0.01 by default)
VARIANTS: dict[str, dict[str, Any]] = {
    "two_stage": {"algorithm": "two_stage", "optimizer": "normalized_gd"},
    "joint": {"algorithm": "joint", "optimizer": "normalized_gd"},
    "adam": {"algorithm": "two_stage", "optimizer": "adam"},
    "adamw": {"algorithm": "two_stage", "optimizer": "adamw"},
}
REPORTED = ("train.loss", "train.loss.gap", "W_ov.cos_target", "W_kq.cos_target", "W_ov.fro", "W_kq.fro", "train.opt_attn.min",
            "train.opt_attn.mean", "train.acc")


def variant_config(config: Config, name: str) -> Config:
    """``config`` with variant ``name``'s training overrides and no ``compare`` list."""
    train = config.train.model_copy(update=VARIANTS[name])
    return config.model_copy(update={"train": train, "compare": []})


def run_compare(config: Config, problem: Problem, ctx: RunContext) -> dict[str, Params | None]:
    """Train every variant of ``config.compare`` on ``problem``, one group each
    (:func:`~stagewise.runs.groups.run_groups`); a variant finished before a resume is
    skipped (its records are already in the stream) and maps to None."""

    def train_variant(index: int, name: str) -> Params:
        group = GroupContext(ctx, index, name, meta={"variant": name})
        return train_two_stage(variant_config(config, name), problem, group)

    return dict(zip(config.compare, run_groups(ctx, config.compare, train_variant)))


def variant_frame(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    """The records of one variant with the ``{variant}/`` prefix removed from the metric names."""
    prefix = f"{name}/"
    rows = frame[frame["metric"].str.startswith(prefix)].copy()
    rows["metric"] = rows["metric"].str.slice(len(prefix))
    return rows


def variant_finals(config: Config, frame: pd.DataFrame) -> VariantFinals:
    """What the comparison claims read (:func:`.claims.compare_claims`): per variant of
    ``config.compare``, each :data:`REPORTED` metric at the last step t = T + T1 (S,), and
    the run's seeds (sorted; none for an empty frame)."""
    total = config.train.steps_stage1 + config.train.steps_stage2
    values: dict[str, dict[str, np.ndarray]] = {v: {m: values_at(variant_frame(frame, v), m, total) for m in REPORTED}
                                               for v in config.compare}  # variant -> metric -> (S,)
    seeds = sorted(int(s) for s in frame["seed"].unique()) if len(frame) else []
    return VariantFinals(total=total, seeds=seeds, values=values)


def compare_table(config: Config, finals: VariantFinals) -> dict[str, Any]:
    """``details.compare``: per variant the final values (lists over seeds) and the norm growth
    ``W_kq.fro.per_step`` = ||W_kq|| at the end / the steps W_kq was trained (T + T1 for joint
    training, else T1; at least 1)."""
    table: dict[str, Any] = {v: {m: [float(x) for x in vals] for m, vals in f.items()} for v, f in finals.values.items()}
    for v in config.compare:
        steps_kq = finals.total if VARIANTS[v]["algorithm"] == "joint" else config.train.steps_stage2
        table[v]["W_kq.fro.per_step"] = [x / max(1, steps_kq) for x in table[v]["W_kq.fro"]]
    return table


def summarize_run(config: Config, frame: pd.DataFrame, tables: Tables, result: RunResult) -> Summary:
    """The lab's summary: :func:`summarize_compare` for a comparison run, else the
    single-training :func:`.summary.summarize`."""
    if config.compare:
        return summarize_compare(config, frame, result.extras)
    return summarize(config, frame, tables, result)


def summarize_compare(config: Config, frame: pd.DataFrame, extras: dict[str, Any]) -> Summary:
    """Summary of a comparison run: the first variant's finals (two_stage when present),
    every variant's claims prefixed ``{variant}/``, the comparison claims, and per-variant
    rates and final values in ``details``."""
    seeds, total = extras["seeds"], config.train.steps_stage1 + config.train.steps_stage2
    main = "two_stage" if "two_stage" in config.compare else config.compare[0]
    no_gen = pd.DataFrame(columns=["seed", "category", "covered", "correct"])
    out, rates = [], {}
    for v in config.compare:
        cfg, sub = variant_config(config, v), variant_frame(frame, v)
        rates[v] = rate_fits(cfg, sub, seeds, extras["eta0"], extras["eta"])
        out += [c.model_copy(update={"id": f"{v}/{c.id}"}) for c in training_claims(cfg, sub, extras, rates[v], no_gen)]
    finals_by_variant = variant_finals(config, frame)
    compared, table = compare_claims(finals_by_variant), compare_table(config, finals_by_variant)
    sub = variant_frame(frame, main)
    finals = {m: values_at(sub, m, total) for m in FINAL_METRICS}
    details = {"vocab_size": extras["vocab_size"], "dim": extras["dim"], "lr_stage1": extras["eta0"], "lr_stage2": extras["eta"],
               "steps": {"stage1": config.train.steps_stage1, "stage2": config.train.steps_stage2},
               **{k: extras["targets"][0][k] for k in ("wov_star_norm", "wkq_star_norm_sq", "prop2_wkq_norm_sq", "prop2_gap")},
               "figures_variant": main, "rates": rates[main], "rates_by_variant": rates, "compare": table,
               "stage_detection_by_variant": {v: {"stage_detection": stage_detection(variant_frame(frame, v))}
                                              for v in config.compare},
               **horizon_claims(variant_config(config, main), sub, extras)[1]}
    return Summary(lab="ntp", seeds=seeds, final={m: Stats.of(v) for m, v in finals.items() if len(v)},
                   per_seed={str(s): {**extras["targets"][i], "n_samples": extras["n_samples"][i]} for i, s in enumerate(seeds)},
                   claims=compared + out, details=details)
