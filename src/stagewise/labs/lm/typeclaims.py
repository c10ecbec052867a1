"""The type claims of one run: the transformer's type-before-fact phase, against the
no-attention baseline (:mod:`.baselines`), with the sensitivity to the rule and h, and the
priors that ignore the question.

The phase of a category table (epochs x semantic-correct / type-correct / type-wrong, on the
question tasks only) at threshold h:

* e_sem = the first record where semantic-correct >= h x its final count (None when the final
  count is 0: the model never learns facts, the phase can last to the end);
* share(e) = type-correct / (type-correct + type-wrong) at record e (0 without wrong predictions);
* e_share = the first record where share >= h;
* lead = (e_sem, else the last record) - e_share, floored at 0, and 0 when e_share is None or
  not before e_sem (no phase);
* max share = max share(e) over the records before e_sem (all records when e_sem is None),
  0 when no record comes before; the phase share = the max share when there is a phase (lead
  > 0), else 0: as declared, "a phase that never happens counts as a lead of 0 and a share of
  0" (the difference claims compare phase shares; the max share is reported beside).

``type_before_fact`` keeps its own rule (:func:`.summary.type_before_fact`: a phase that never
happens is None, so it fails); the difference claims compare the lead and the max share of the
model with the ``bow-last`` baseline's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...report.claims import Claim
from . import claimspecs as cs
from .categories import PLACE_KINDS
from .categories import CATEGORIES
from .config import QUESTION_TASKS


REFERENCE_BASELINE = "bow-last"
"""The baseline the difference claims compare with (its records carry ``bow-lastK``)."""


@dataclass(frozen=True)
class Phase:
    """The phase numbers of one category table at one h (see the module docstring)."""

    semantic_half_epoch: float | None
    majority_epoch: float | None
    lead: float
    max_share: float
    phase_share: float
    records: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def phase(counts: pd.DataFrame, half: float) -> Phase:
    """:class:`Phase` of an epoch x category count table (columns :data:`CATEGORIES`)."""
    epochs = counts.index.to_numpy(float)  # (E,)
    sem, tc, tw = (counts[c].to_numpy(float) for c in CATEGORIES)  # (E,) each
    wrong = tc + tw
    share = np.divide(tc, wrong, out=np.zeros_like(tc), where=wrong > 0)  # (E,)
    e_sem = _first(epochs, sem >= half * sem[-1]) if len(sem) and sem[-1] > 0 else None
    e_share = _first(epochs, (share >= half) & (wrong > 0))
    end = e_sem if e_sem is not None else (float(epochs[-1]) if len(epochs) else None)
    lead = max(0.0, end - e_share) if e_share is not None and end is not None else 0.0
    before = share[epochs < e_sem] if e_sem is not None else share
    top = float(before.max()) if len(before) else 0.0
    return Phase(e_sem, e_share, float(lead), top, top if lead > 0 else 0.0, int(len(epochs)))


def _first(epochs: np.ndarray, condition: np.ndarray) -> float | None:
    hits = np.nonzero(condition)[0]
    return float(epochs[hits[0]]) if len(hits) else None


def question_predictions(frame: pd.DataFrame | None) -> pd.DataFrame | None:
    """The rows of the question tasks (None when there are none)."""
    if frame is None or not len(frame):
        return None
    rows = frame[frame["task"].isin(QUESTION_TASKS)]
    return rows if len(rows) else None


def rule_column(predictions: pd.DataFrame, rule: str) -> str | None:
    """The predictions column of a type rule ("category": closed, "category_open": open,
    "category_user": a tracked run's own rule), or None when the table has no values for it
    (runs made before the open rule)."""
    column = {"open": "category_open", "user": "category_user"}.get(rule, "category")
    return column if column in predictions and predictions[column].notna().any() else None


def category_counts(predictions: pd.DataFrame, task: str | None = None, rule: str = "closed") -> pd.DataFrame:
    """Epoch x category counts (columns in CATEGORIES order; missing categories are 0) under
    the closed or open type rule; the open rule's excluded examples (unclear type) are left out."""
    rows = predictions if task is None else predictions[predictions["task"] == task]
    column = rule_column(rows, rule) or "category"
    counts = rows.groupby(["epoch", column]).size().unstack(fill_value=0)
    return counts.reindex(columns=list(CATEGORIES), fill_value=0).sort_index()


def reference_rows(baselines: pd.DataFrame | None) -> pd.DataFrame | None:
    """The reference baseline's rows (``bow-lastK``) of the question tasks, or None."""
    rows = question_predictions(baselines)
    if rows is None:
        return None
    mine = rows[rows["baseline"].astype(str).str.startswith(REFERENCE_BASELINE)]
    return mine if len(mine) else None


def difference_claims(model: pd.DataFrame, baseline: pd.DataFrame | None, rule: str, half: float,
                      suffix: str = "", elsewhere: str | None = None) -> tuple[list[Claim], dict[str, Any]]:
    """``type_lead_beyond_baseline`` and ``type_share_beyond_baseline`` of one run, with the
    phases they compare; not testable without the baseline's records or with fewer than 2;
    not applicable to a model trained ``elsewhere`` (its source kind: no baseline saw its batches)."""
    specs = (cs.TYPE_LEAD_BEYOND_BASELINE, cs.TYPE_SHARE_BEYOND_BASELINE)
    mine = phase(category_counts(model, rule=rule), half)
    facts: dict[str, Any] = {"model": mine.as_dict()}
    if baseline is None and elsewhere is not None:
        reason = (f"a baseline claim; the model was trained elsewhere (source.kind={elsewhere}), so no baseline was "
                  "trained on its batches")
        return [s.not_applicable(reason, statement=s.statement + suffix) for s in specs], facts
    if baseline is None:
        reason = "no bow-last baseline was trained in this run (set baselines.kinds=[bow, bow-last])"
        return [s.not_testable(reason, statement=s.statement + suffix) for s in specs], facts
    theirs = phase(category_counts(baseline, rule=rule), half)
    facts["baseline"] = theirs.as_dict()
    facts["baseline_name"] = str(baseline["baseline"].iloc[0])
    if mine.records < 2:
        return [s.not_testable("fewer than 2 records", statement=s.statement + suffix) for s in specs], facts
    evidence = (f"{rule} rule, h = {half:g}: transformer lead {mine.lead:g} epochs (type majority at "
                f"{_e(mine.majority_epoch)}, facts half-way at {_e(mine.semantic_half_epoch)}), max share before the facts "
                f"{mine.max_share:.2f} (phase share {mine.phase_share:.2f}); {facts['baseline_name']} lead {theirs.lead:g} "
                f"(majority at {_e(theirs.majority_epoch)}, facts at {_e(theirs.semantic_half_epoch)}), max share "
                f"{theirs.max_share:.2f} (phase share {theirs.phase_share:.2f}); a phase that never happens has lead 0 and share 0")
    lead, share = mine.lead - theirs.lead, mine.phase_share - theirs.phase_share
    facts.update(lead_difference=lead, share_difference=share)
    claims = [specs[0].result(lead, evidence + (" (the transformer does not exceed the template-frequency baseline)"
                                                if lead <= 0 else ""), statement=specs[0].statement + suffix),
              specs[1].result(share, evidence + (" (the transformer does not exceed the template-frequency baseline)"
                                                 if share <= 0 else ""), statement=specs[1].statement + suffix)]
    return claims, facts


def _e(epoch: float | None) -> str:
    return "never" if epoch is None else f"epoch {epoch:g}"


def sensitivity(model: pd.DataFrame, baseline: pd.DataFrame | None, raw: Any) -> list[dict[str, Any]]:
    """The type claims' values at h in :data:`~.claimspecs.SENSITIVITY_HALVES` under both rules:
    rows {rule, h, type_before_fact (lead or None), lead_difference, share_difference, and
    whether each passes}. ``raw(counts, h)`` gives type_before_fact's lead (NaN: never)."""
    rules = ["open", "closed"] if rule_column(model, "open") is not None else ["closed"]
    out = []
    for rule in rules:
        counts = category_counts(model, rule=rule)
        other = category_counts(baseline, rule=rule) if baseline is not None else None
        for h in cs.SENSITIVITY_HALVES:
            lead = raw(counts, h)
            row: dict[str, Any] = {"rule": rule, "h": h, "type_before_fact": lead, "type_before_fact_holds": _passes(lead)}
            if other is not None:
                mine, theirs = phase(counts, h), phase(other, h)
                row.update(lead_difference=mine.lead - theirs.lead, lead_holds=mine.lead - theirs.lead > 0,
                           share_difference=round(mine.phase_share - theirs.phase_share, 4),
                           share_holds=mine.phase_share - theirs.phase_share > 0)
            out.append(row)
    return out


def _passes(value: float | None) -> bool | None:
    if value is None:
        return None
    return bool(np.isfinite(value) and value > 0)


def _of_kind(top1_kind: pd.Series, asked: str) -> pd.Series:
    """Which predictions are of the asked kind: the same kind, or any place for ``place``."""
    if asked == "place":
        return top1_kind.isin(PLACE_KINDS)
    return top1_kind == asked


def question_ignoring_prior(rows: pd.DataFrame, epoch: float) -> dict[str, Any] | None:
    """At record ``epoch``: per declared type K asked by some question, the share of top-1
    predictions of kind K among the questions that ask for K and among those that ask for
    another (typed) kind; a kind predicted as often when not asked is a prior that ignores the
    question. Also the type-correct share a question-blind prior would give (each question's
    kind share among the questions *not* asking for it), beside the measured share of
    predictions of the asked kind (right or type-correct: ``right_kind_share``), and the
    share of type-wrong answers that are a place of another granularity (a city for a country
    question). None without the ``top1_kind`` / ``asked_type`` columns."""
    if "top1_kind" not in rows or "asked_type" not in rows:
        return None
    at = rows[(rows["epoch"] == epoch) & rows["asked_type"].notna()]
    if not len(at):
        return None
    kinds: dict[str, Any] = {}
    blind, n_typed = 0.0, 0
    for kind, asked in at.groupby("asked_type"):
        others = at[at["asked_type"] != kind]
        share_asked = float(_of_kind(asked["top1_kind"], str(kind)).mean())
        share_other = float(_of_kind(others["top1_kind"], str(kind)).mean()) if len(others) else None
        kinds[str(kind)] = {"questions": int(len(asked)), "share_when_asked": round(share_asked, 4),
                            "share_when_not_asked": None if share_other is None else round(share_other, 4)}
        if share_other is not None:
            blind += share_other * len(asked)
            n_typed += len(asked)
    column = rule_column(at, "open") or "category"
    wrong = at[at[column] == "type-wrong"]
    place_q = wrong["asked_type"].isin(PLACE_KINDS)
    granularity = wrong[place_q & wrong["top1_kind"].isin(PLACE_KINDS) & (wrong["top1_kind"] != wrong["asked_type"])]
    return {"epoch": float(epoch), "kinds": kinds,
            "type_correct_share": round(float((at[column] == "type-correct").mean()), 4),
            "right_kind_share": round(float(((at["top1_kind"] == at["asked_type"])
                                             | ((at["asked_type"] == "place") & at["top1_kind"].isin(PLACE_KINDS))).mean()), 4),
            "question_blind_share": round(blind / n_typed, 4) if n_typed else None,
            "type_wrong": int(len(wrong)), "type_wrong_other_granularity": int(len(granularity))}
