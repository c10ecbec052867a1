"""The measured phases of one run's records, before any verdict: the category counts of the
question tasks, the transformer's and the no-attention baselines' (:mod:`.baselines`) type
phase in epochs and on the facts' clock, the sensitivity to the rule and h, the priors that
ignore the question, and the epoch series of the records. Every claim read from them is judged
in :mod:`.claims`.

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

``type_before_fact`` keeps its own rule (:func:`.claims.type_before_fact`: a phase that never
happens is None, so it fails).

The difference claims (issue 38) read each model on its own **facts' clock**: a lead in epochs
compares learning speeds (it flipped with the baseline's rate), so both the transformer and the
baseline are read where their facts are at the same stage. With π(e) = semantic-correct(e) /
its final count (the model's own):

* share_at(f) = share at the first record where π >= f, linearly interpolated in π from the
  record before it (the first record's share when π starts above f);
* progress share = the mean of share_at(f) over f in :data:`~.claimspecs.FACT_FRACTIONS`;
* majority progress = π at the first record with share >= h (None: never); progress lead =
  max(0, h - majority progress), 0 without a majority.

A clock needs facts that were learned (final count > 0) and had settled by the end
(:func:`facts_settled`), and at least :data:`~.claimspecs.MIN_RECORDS_BEFORE` records before π
reaches h; otherwise the claim is not testable, with that reason. In a run with
``baselines.lr_grid`` each claim compares with the rate whose value is largest (the strongest for
the alternative "the transformer does no more than the baseline") and reports every rate
(:func:`.claims.difference_claims`). The epoch-based lead and max share (:func:`phase`) stay
beside them in the details.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from . import claimspecs as cs
from .categories import PLACE_KINDS
from .categories import CATEGORIES
from .config import QUESTION_TASKS


REFERENCE_BASELINE = "bow-last"
"""The baseline the difference claims compare with (its records carry ``bow-lastK``, ``bow-lastK@lrR`` in a grid run)."""


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


@dataclass(frozen=True)
class Settling:
    """Whether a count series had settled at the end: its growth over the last
    :data:`~.claimspecs.SETTLE_SPAN` of the recorded epochs, as a share of the final count."""

    settled: bool
    growth: float
    from_epoch: float
    from_count: float
    final: float

    def text(self) -> str:
        return (f"{self.from_count:.0f} at epoch {self.from_epoch:g} -> {self.final:.0f} at the end, {self.growth:+.0%} of the "
                f"final count over the last {cs.SETTLE_SPAN:.0%} of the epochs (settled: at most {cs.SETTLE_GROWTH:.0%})")


def facts_settled(epochs: np.ndarray, sem: np.ndarray) -> Settling:
    """:class:`Settling` of the semantic-correct counts ``sem`` (E,) at ``epochs`` (E,): the count
    at the last record at or before epoch e_end - SETTLE_SPAN (e_end - e_0) against the final one."""
    start = float(epochs[-1] - cs.SETTLE_SPAN * (epochs[-1] - epochs[0]))
    i = int(np.searchsorted(epochs, start, side="right")) - 1
    final = float(sem[-1])
    growth = (final - float(sem[max(i, 0)])) / final if final > 0 else 0.0
    return Settling(growth <= cs.SETTLE_GROWTH + cs.SETTLE_TOL, growth, float(epochs[max(i, 0)]), float(sem[max(i, 0)]), final)


@dataclass(frozen=True)
class Clock:
    """One model's type phase on its facts' clock (see the module docstring); ``reason`` says
    why it cannot be read (then the values are None)."""

    reason: str | None
    settling: dict[str, Any] | None
    shares_at: dict[str, float] | None
    progress_share: float | None
    majority_progress: float | None
    progress_lead: float | None
    records_before: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def clock(counts: pd.DataFrame, half: float) -> Clock:
    """:class:`Clock` of an epoch x category count table (columns :data:`CATEGORIES`)."""
    epochs = counts.index.to_numpy(float)  # (E,)
    sem, tc, tw = (counts[c].to_numpy(float) for c in CATEGORIES)  # (E,) each
    if len(epochs) < 2 or sem[-1] <= 0:
        why = "fewer than 2 records" if len(epochs) < 2 else "no semantic-correct prediction at the end: no facts' clock"
        return Clock(why, None, None, None, None, None, 0)
    settling = facts_settled(epochs, sem)
    progress = sem / sem[-1]  # (E,) the facts' clock
    wrong = tc + tw
    share = np.divide(tc, wrong, out=np.zeros_like(tc), where=wrong > 0)  # (E,)
    before = int((progress < half).sum())
    if not settling.settled:
        return Clock(f"the facts were still rising at the last record ({settling.text()}): the claim is measured against "
                     "the final count", asdict(settling), None, None, None, None, before)
    if before < cs.MIN_RECORDS_BEFORE:
        return Clock(f"only {before} record(s) before the facts reach {half:g} of their final count (at least "
                     f"{cs.MIN_RECORDS_BEFORE}): too sparse to read the phase on the facts' clock (record more often: "
                     "train.eval_every)", asdict(settling), None, None, None, None, before)
    shares = {f"{f:g}": _share_at(progress, share, f) for f in cs.FACT_FRACTIONS}
    i = np.nonzero((share >= half) & (wrong > 0))[0]
    majority = float(progress[i[0]]) if len(i) else None
    lead = max(0.0, half - majority) if majority is not None else 0.0
    return Clock(None, asdict(settling), shares, float(np.mean(list(shares.values()))), majority, lead, before)


def _share_at(progress: np.ndarray, share: np.ndarray, f: float) -> float:
    """The share where the clock ``progress`` (E,) first reaches ``f``, linear in progress from the record before."""
    i = int(np.nonzero(progress >= f)[0][0])  # exists: progress ends at 1 >= f
    if i == 0 or progress[i] <= progress[i - 1]:
        return float(share[i])
    t = (f - progress[i - 1]) / (progress[i] - progress[i - 1])
    return float(share[i - 1] + t * (share[i] - share[i - 1]))


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


def sensitivity(model: pd.DataFrame, baseline: pd.DataFrame | None, raw: Any) -> list[dict[str, Any]]:
    """The type claims' values at h in :data:`~.claimspecs.SENSITIVITY_HALVES` under both rules:
    rows {rule, h, type_before_fact (lead or None), lead_difference, share_difference (on the
    facts' clock, against the strongest rate; None where a clock cannot be read), and whether
    each passes}. ``raw(counts, h)`` gives type_before_fact's lead (NaN: never)."""
    rules = ["open", "closed"] if rule_column(model, "open") is not None else ["closed"]
    out = []
    for rule in rules:
        counts = category_counts(model, rule=rule)
        others = ([category_counts(rows, rule=rule) for _, rows in baseline.groupby("baseline", sort=True)]
                  if baseline is not None else [])
        for h in cs.SENSITIVITY_HALVES:
            lead = raw(counts, h)
            row: dict[str, Any] = {"rule": rule, "h": h, "type_before_fact": lead, "type_before_fact_holds": _passes(lead)}
            mine, theirs = clock(counts, h), [c for c in (clock(o, h) for o in others) if c.reason is None]
            if others and mine.reason is None and theirs:
                lead_d = float(mine.progress_lead or 0.0) - max(float(c.progress_lead or 0.0) for c in theirs)
                share_d = float(mine.progress_share or 0.0) - max(float(c.progress_share or 0.0) for c in theirs)
                row.update(lead_difference=round(lead_d, 4), lead_holds=lead_d > 0,
                           share_difference=round(share_d, 4), share_holds=share_d > 0)
            elif others:
                row.update(lead_difference=None, lead_holds=None, share_difference=None, share_holds=None)
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


# --- the records as series: epochs of a run's evaluations, and where a series first meets a condition ---------------
def epoch_number(x: Any) -> int | float:
    """An epoch as an int when it is whole (epoch ends), else a float (sub-epoch evaluations)."""
    x = float(x)
    return int(x) if x.is_integer() else round(x, 4)


def first_epoch(epochs: np.ndarray, condition: np.ndarray) -> int | float | None:
    """The first of ``epochs`` (E,) where ``condition`` (E,) holds (:func:`epoch_number`); None if never."""
    hits = np.nonzero(condition)[0]
    return epoch_number(epochs[hits[0]]) if len(hits) else None


def half_drop_epoch(epochs: np.ndarray, loss: np.ndarray, half: float) -> int | float | None:
    """First epoch where loss[0] - loss[e] >= half * (loss[0] - min loss) (a float for a
    sub-epoch evaluation, see :func:`epoch_number`); None if it never falls."""
    drop = loss[0] - np.nanmin(loss)
    if not np.isfinite(drop) or drop <= 0:
        return None
    return first_epoch(epochs, loss[0] - loss >= half * drop)


def half_drop_facts(frame: pd.DataFrame, half: float) -> dict[str, dict[str, Any]]:
    """Per task (blimp, sick): where its training loss first falls by ``half`` of its total drop,
    per epoch (``train.loss.T``) and per step (``train.batch_loss.T``; None: never, or not
    logged), and the loss at the first record, its minimum and its last value."""
    found: dict[str, dict[str, Any]] = {}
    for task in ("blimp", "sick"):
        epochs, loss = epoch_series(frame, f"train.loss.{task}")
        steps, batch = step_series(frame, f"train.batch_loss.{task}")
        found[task] = {"half_drop_epoch": half_drop_epoch(epochs, loss, half) if len(loss) else None,
                       "half_drop_step": half_drop_epoch(steps, batch, half) if len(batch) else None,
                       "loss_0": float(loss[0]) if len(loss) else None, "loss_min": float(np.nanmin(loss)) if len(loss) else None,
                       "loss_final": float(loss[-1]) if len(loss) else None}
    return found


def epoch_series(frame: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(epochs, values) of an epoch-level metric (logged with the metric ``epoch`` at the same step)."""
    wide = frame[frame["metric"].isin(["epoch", metric])].pivot_table(index="step", columns="metric", values="value")
    if metric not in wide or "epoch" not in wide:
        return np.array([], dtype=float), np.array([])
    wide = wide.dropna(subset=["epoch", metric]).sort_index()
    return wide["epoch"].to_numpy(float), wide[metric].to_numpy(float)


def step_series(frame: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of a per-step metric."""
    rows = frame[frame["metric"] == metric].sort_values("step")
    return rows["step"].to_numpy().astype(int), rows["value"].to_numpy(float)
