"""The Summary of an LM run, computed from the run's records only (the ``predictions`` /
``baseline_predictions`` tables and the logged epoch metrics): the final values, the category
counts per epoch (closed and open type rule, per task, per baseline), the phases on the facts'
clock (:mod:`.phases`), the two-task records (:mod:`.twotask`) and ``stage_detection``. The
claims are judged in :mod:`.claims` (declared in :mod:`.claimspecs`); their numbers stay beside
them in ``details``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...measure import detect_stages
from ...report.claims import Claim, Stats, Summary
from ..contract import RunResult, Tables

from . import claimspecs as cs
from . import phases
from .categories import CATEGORIES
from .claims import (control_name, difference_claims, half_drop_claim, order_claims, raw_lead, syntax_claim,
                     type_before_fact, type_claims)
from .config import Config
from .phases import category_counts, epoch_number, rule_column
from .twotask import stage_conditions as twotask_stages


def rule_agreement(predictions: pd.DataFrame) -> dict[str, Any] | None:
    """Closed vs open rule per epoch: {epoch: {closed category: {open category: count}}}, and
    per category the fraction of its closed-rule examples that the open rule puts in the same
    category (excluded examples left out), at epoch 0 (the first epoch) and at the closed
    rule's type-correct peak. None without open-rule records."""
    if rule_column(predictions, "open") is None:
        return None
    table = predictions.groupby(["epoch", "category", "category_open"]).size()
    crosstab: dict[str, dict[str, dict[str, int]]] = {}
    for (epoch, closed, opened), n in table.items():
        crosstab.setdefault(str(epoch_number(epoch)), {}).setdefault(str(closed), {})[str(opened)] = int(n)
    counts = category_counts(predictions)
    first = counts.index[0]
    peak = counts.index[int(np.argmax(counts["type-correct"].to_numpy()))]

    def agreement(epoch: Any) -> dict[str, float | None]:
        rows = predictions[(predictions["epoch"] == epoch) & (predictions["category_open"] != "excluded")]
        out: dict[str, float | None] = {}
        for c in CATEGORIES:
            mine = rows[rows["category"] == c]
            out[c] = float((mine["category_open"] == c).mean()) if len(mine) else None
        out["all"] = float((rows["category"] == rows["category_open"]).mean()) if len(rows) else None
        return out

    return {"crosstab": crosstab, "first_epoch": epoch_number(first), "type_correct_peak_epoch": epoch_number(peak),
            "agreement_first": agreement(first), "agreement_peak": agreement(peak),
            "excluded": int((predictions[predictions["epoch"] == first]["category_open"] == "excluded").sum())}


def _at_evaluations(frame: pd.DataFrame, metric: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{seed: (steps, values)} of an evaluation metric, by step."""
    rows = frame[frame["metric"] == metric].sort_values("step")
    return {int(seed): (g["step"].to_numpy(float), g["value"].to_numpy(float)) for seed, g in rows.groupby("seed")}


def stage_detection(config: Config, frame: pd.DataFrame) -> dict[str, Any] | None:
    """Per-seed stage boundaries in optimizer steps, in the shape of
    :meth:`~stagewise.measure.StageReport.as_dict`, from the evaluations (epoch ends and
    ``train.eval_every``), with the claims' own conditions (h = ``thresholds.half``):

    * answer framing: ``type_wrong_halved`` (type-wrong count <= h x its first count),
      ``type_correct_majority`` (type-correct >= h of the wrong predictions, some wrong),
      ``semantic_half`` (semantic-correct >= h x its last count): the steps of the epochs
      ``type_before_fact`` compares (left out when its count is 0 at the reference point);
    * blimp / sick with held-out records: ``blimp_beats_prior`` / ``sick_beats_prior`` (the
      held-out accuracy beats the majority share by the declared margin from this record on,
      :func:`.twotask.stage_conditions`), as ``syntax_before_semantics`` reads them.

    None when no stage applies. Each condition is logged as a derived value that is >= 0
    exactly when it holds, so a crossing is the first evaluation where the claim's test passes."""
    h = config.thresholds.half
    derived: list[pd.DataFrame] = []
    if config.task.framing == "answer":
        rule = config.thresholds.type_rule
        suffix = f"_{rule}" if rule != "closed" and (frame["metric"] == f"train.type_correct_{rule}").any() else ""
        counts = {c: _at_evaluations(frame, f"train.{c}{suffix if c != 'semantic_correct' or suffix == '_user' else ''}")
                  for c in ("type_wrong", "type_correct", "semantic_correct")}
        for seed, (steps, tw) in counts["type_wrong"].items():
            tc, sem = counts["type_correct"][seed][1], counts["semantic_correct"][seed][1]
            wrong = tc + tw
            rows = {"type_wrong_halved": h * tw[0] - tw if tw[0] > 0 else None,
                    "type_correct_majority": np.where(wrong > 0, tc - h * wrong, np.nan),
                    "semantic_half": sem - h * sem[-1] if sem[-1] > 0 else None}
            derived += [pd.DataFrame({"step": steps, "seed": seed, "metric": n, "value": v})
                        for n, v in rows.items() if v is not None]
    derived += twotask_stages(config, frame)  # {blimp,sick}_beats_prior: syntax_before_semantics's condition
    if not derived:
        return None
    table = pd.concat(derived, ignore_index=True)
    names = list(dict.fromkeys(table["metric"]))
    return detect_stages(table, {n: (n, 0.0, "above") for n in names}).as_dict()


def _baseline_counts(frame: pd.DataFrame | None, rule: str) -> dict[str, Any] | None:
    """{baseline: {epoch: {category: count}}} of the question tasks under ``rule``."""
    rows = phases.question_predictions(frame)
    if rows is None:
        return None
    return {str(name): {str(epoch_number(e)): {c: int(v) for c, v in row.items()}
                        for e, row in category_counts(group, rule=rule).iterrows()}
            for name, group in rows.groupby("baseline", sort=False)}


def _by_epoch(counts: pd.DataFrame) -> dict[str, dict[str, int]]:
    """A category table (epochs x categories) as ``{epoch: {category: count}}`` for summary.json."""
    return {str(epoch_number(e)): {c: int(v) for c, v in row.items()} for e, row in counts.iterrows()}


def summarize(config: Config, frame: pd.DataFrame, tables: Tables, result: RunResult) -> Summary:
    """The Summary: final epoch metrics, the per-epoch category counts, the claims and
    ``stage_detection`` (:func:`stage_detection`)."""
    extras = result.extras
    epoch_rows = frame[frame["metric"] == "epoch"]
    final_step = int(epoch_rows["step"].max()) if len(epoch_rows) else 0
    at_end = frame[(frame["step"] == final_step) & frame["metric"].str.startswith(("train.", "eval.", "baseline.", "probe."))
                    & ~frame["metric"].str.startswith("train.batch_loss")]
    at_end = at_end[~at_end["metric"].str.contains(r"^probe\.[^.]+\.paradigm\.", regex=True)]  # per paradigm: in the metrics
    final = {m: Stats.of([v]) for m, v in zip(at_end["metric"], at_end["value"])}
    details: dict[str, Any] = {"model": extras.get("model"), "examples": extras.get("examples"),
                               "dropped_multi_token": extras.get("dropped", {}), "steps": extras.get("steps"),
                               "control": control_name(config), "framing": config.task.framing,
                               "record": config.train.record, "replaced_answers": extras.get("replaced_answers"),
                               "type_rule_excluded": extras.get("type_rule_excluded")}
    claims = _type_part(config, tables, details)
    if {"blimp", "sick"} <= set(config.task.tasks()):
        details["syntax_half_drop"] = half_drop_claim(config, frame)[1]  # the earlier measure, descriptive only
    syntax, details["two_task"] = syntax_claim(config, frame)  # issue 27: held-out, above each task's prior
    if syntax is not None:
        claims.append(syntax)
    if config.order:  # issue 39: the researcher's declared order claims on probe metrics
        ordered, details["order"] = order_claims(config, frame)
        claims += ordered
    stages = stage_detection(config, frame)
    if stages is not None:
        details["stage_detection"] = stages
    # one fine-tuned model per run: its seed's final values, as the other labs give theirs (the claims' values are
    # in the claims), and the subsample seed that, with the seed, pairs it with its controls
    values = {"sample_seed": config.task.sample_seed, **{m: stats.mean for m, stats in final.items()}}
    per_seed = {str(seed): values for seed in config.seed_list()}
    return Summary(lab="lm", seeds=config.seed_list(), final=final, per_seed=per_seed, claims=claims, details=details)


def _type_part(config: Config, tables: Tables, details: dict[str, Any]) -> list[Claim]:
    """The type claims of the question tasks' predictions (and their details, written into
    ``details``): "not applicable" for a run that has predictions but no question task, none
    without predictions."""
    half = config.thresholds.half
    every = tables.get("predictions")
    predictions = phases.question_predictions(every)
    if predictions is None:
        if every is None or not len(every):
            return []
        reason = (f"a type claim; this run's tasks ({', '.join(config.task.tasks())}) answer with label words, not typed "
                  "answers of a question")
        return [spec.not_applicable(reason) for spec in cs.TYPE_CLAIMS]
    rule = config.thresholds.type_rule if rule_column(predictions, config.thresholds.type_rule) else "closed"
    details["type_rule"] = rule
    counts = category_counts(predictions)
    details["category_counts"] = _by_epoch(counts)
    agreement = rule_agreement(predictions)
    if agreement is not None:
        details["category_counts_open"] = _by_epoch(category_counts(predictions, rule="open"))
        details["type_rules"] = agreement
        details["type_before_fact_closed"] = type_before_fact(counts, half)[2]
    counts = category_counts(predictions, rule=rule)
    if len(config.task.tasks()) > 1:
        details["category_counts_per_task"] = {task: _by_epoch(category_counts(every, task)) for task in config.task.tasks()}
    _, evidence, facts = type_before_fact(counts, half)
    details["type_before_fact"] = facts
    control = f" (control: {details['control']}; the claim should fail or be null)" if details["control"] else ""
    raw, described = type_claims(facts, evidence, control + f" [{rule} type rule]")
    baseline = phases.reference_rows(tables.get("baseline_predictions"))
    elsewhere = config.source.kind if config.source.kind != "train" else None
    differences, compared = difference_claims(predictions, baseline, rule, half, control + f" [{rule} type rule]", elsewhere)
    details["descriptions"] = described
    details["baseline_comparison"] = compared
    details["baselines"] = _baseline_counts(tables.get("baseline_predictions"), rule)
    details["sensitivity"] = phases.sensitivity(predictions, baseline, raw_lead)
    peak = counts.index[int(np.argmax(counts["type-correct"].to_numpy()))] if len(counts) else None
    prior = phases.question_ignoring_prior(predictions, peak) if peak is not None else None
    if prior is not None:
        details["question_ignoring_prior"] = prior
    return raw + differences
