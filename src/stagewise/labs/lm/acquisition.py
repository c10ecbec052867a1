"""Order of acquisition in pretraining (issue 44): in what order does a small GPT-2, trained
from scratch, learn grammar and meaning?

Input, one run = one seed: the long-form metrics frame (columns step, metric, value; a
``seed`` column, if any, holds one seed) at log-spaced records t_0 = 0 < t_1 < ... < t_{R-1},
with ``probe.{probe}.paradigm.{P}.accuracy`` (minimal-pair accuracy of paradigm P over the
pairs whose words the corpus covers), ``probe.words.content.share.{exact,class_correct}``
and ``probe.heldout.loss``. Beside the runs: the n-gram references (columns order, paradigm,
accuracy; orders 1-4) and the coverage (columns paradigm, field, pairs, covered_pairs,
covered_share, known_share) of the corpus.

Definitions (the constants are declared in :mod:`.claimspecs`, before any run), a_P(t) the
accuracy of paradigm P in one run:

    chance_P  = a_P(t_0)                           the untrained model's score (issue 44)
    final_P   = mean of a_P over the last FINAL_RECORDS records
    gain_P    = final_P - chance_P;                acquired: gain_P >= ACQUIRED_GAIN
    step_P    = crossing_step(t, a_P, chance_P + HALF gain_P, above, sustain=SUSTAIN)
                (acquired paradigms only; None where no record qualifies)
    heuristic = final_P <= chance_P - HEURISTIC_DROP while the held-out loss fell (last < first)
    onset(m)  = crossing_step of start + HALF (final - start) for a word-share curve m (start:
                its first record), None when final - start < MIN_RISE (no rise)

Steps are compared on log2(t + 1) (the records are log-spaced). Paradigms with fewer than
MIN_COVERED_PAIRS covered pairs are not testable for that corpus.

Claims (:data:`.claimspecs.ACQUISITION_CLAIMS`), each with the shuffled-word corpus beside:

1. ``syntax_before_semantics_pretraining`` (paper 1, Gong et al. arXiv 2502.20681: wrong ->
   type-correct -> right): per seed log2(onset(exact) + 1) - log2(onset(class) + 1) on the
   content-word shares > 0 (exact never rising: log2(t_last + 2) in its place, a lower bound);
   median over seeds; the shuffled corpus, an unpaired control, must fail.
2. ``acquisition_order_agrees_over_seeds`` (Choshen et al. ACL 2022, "The Grammar-Learning
   Trajectories of Neural Language Models"): rho-bar = mean over seed pairs of Spearman's rho of
   the steps of the paradigms acquired in every seed; p = (1 + #{null >= rho-bar}) / (1 + B) with
   the paradigm labels permuted within each seed, B = PERMUTATIONS; holds when p <= ORDER_ALPHA.
3. ``parallel_acquisition`` (Evanson et al. ACL Findings 2023): per seed, early = the median
   step of the first-acquired tercile; value = median over the last-acquired tercile of
   (a_P(last record <= early) - chance_P) / gain_P >= PARALLEL_SHARE.
4. ``beyond_ngram_{P}`` (Choshen et al.'s n-gram reference): final_P - max over orders of the
   n-gram accuracy >= BEYOND_NGRAM, median over seeds; against the shuffled corpus's own n-grams
   the shuffled runs must fail.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from ...measure.stages import crossing_step
from ...report import verdicts
from ...report.claims import Claim
from . import claimspecs as cs
from .claimspecs import (ACQUIRED_GAIN, BEYOND_NGRAM, FINAL_RECORDS, HALF, HEURISTIC_DROP,  # noqa: F401  (re-exported)
                         MIN_COVERED_PAIRS, MIN_PARADIGMS, MIN_RISE, MIN_SEEDS, MIN_TERCILE_PARADIGMS, ORDER_ALPHA,
                         PARALLEL_SHARE, PERMUTATION_SEED, PERMUTATIONS, SUSTAIN)

LOSS = "probe.heldout.loss"
CONTENT_EXACT = "probe.words.content.share.exact"
CONTENT_CLASS = "probe.words.content.share.class_correct"
REAL, SHUFFLED = "real", "shuffled words"
"""The two arms: the corpus as written, and the control corpus with the words shuffled within each sentence."""
TABLE_COLUMNS = ("paradigm", "field", "chance", "final", "gain", "acquired", "step", "heuristic")
_CHUNK = 1000  # permutations drawn at a time (bounds the (chunk, S, K) index array)


def paradigm_metric(paradigm: str, probe: str = "zorro") -> str:
    return f"probe.{probe}.paradigm.{paradigm}.accuracy"


def log_step(step: float) -> float:
    """log2(step + 1): where steps are compared (inf stays inf: never)."""
    return math.log2(step + 1.0)


def median_step(steps: Sequence[float | None]) -> float:
    """The median step on the log2(t + 1) scale, back on the step scale; None/NaN counts as never
    (inf), so the result is inf when at most half the values are finite."""
    logs = [math.inf if s is None or math.isnan(s) else log_step(s) for s in steps]
    middle = float(np.median(logs)) if logs else math.inf
    return math.inf if math.isinf(middle) else 2.0 ** middle - 1.0


def wide(frame: pd.DataFrame) -> pd.DataFrame:
    """(R, M): one row per record step (ascending, the index), one column per metric, of one run."""
    missing = {"step", "metric", "value"} - set(frame.columns)
    if missing:
        raise ValueError(f"metrics frame lacks columns {sorted(missing)}; needs step, metric, value")
    if "seed" in frame.columns and frame["seed"].nunique() > 1:
        raise ValueError(f"one run per frame: got seeds {sorted(frame['seed'].unique().tolist())}")
    return frame.pivot_table(index="step", columns="metric", values="value", aggfunc="mean", dropna=False).sort_index()


def curve(table: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps (T,), values (T,)) of ``metric`` in a :func:`wide` table, records without a value left out."""
    if metric not in table.columns:
        raise ValueError(f"metric {metric!r} not in the metrics frame")
    values = table[metric].to_numpy(dtype=float)  # (R,)
    known = ~np.isnan(values)
    steps, values = table.index.to_numpy(dtype=float)[known], values[known]
    if values.size <= FINAL_RECORDS:
        raise ValueError(f"metric {metric!r}: {values.size} records, needs more than {FINAL_RECORDS}")
    return steps, values


def _crossing(steps: np.ndarray, values: np.ndarray, threshold: float) -> float | None:
    step = crossing_step(steps, values, threshold, "above", SUSTAIN)
    return None if math.isnan(step) else step


def testable_split(coverage: pd.DataFrame) -> tuple[set[str], pd.DataFrame]:
    """(paradigms with >= MIN_COVERED_PAIRS covered pairs, the coverage rows of the others)."""
    ok = coverage["covered_pairs"] >= MIN_COVERED_PAIRS
    return set(coverage.loc[ok, "paradigm"]), coverage.loc[~ok].reset_index(drop=True)


def _table(table: pd.DataFrame, probe: str, coverage: pd.DataFrame | None) -> pd.DataFrame:
    prefix, suffix = f"probe.{probe}.paradigm.", ".accuracy"
    fields = {} if coverage is None else dict(zip(coverage["paradigm"], coverage["field"]))
    keep = None if coverage is None else testable_split(coverage)[0]
    _, loss = curve(table, LOSS)
    loss_fell = bool(loss[-1] < loss[0])
    rows = []
    for metric in sorted(c for c in table.columns if c.startswith(prefix) and c.endswith(suffix)):
        name = metric[len(prefix):-len(suffix)]
        if keep is not None and name not in keep:
            continue
        steps, values = curve(table, metric)
        chance, final = float(values[0]), float(values[-FINAL_RECORDS:].mean())
        gain = final - chance
        acquired = gain >= ACQUIRED_GAIN
        step = _crossing(steps, values, chance + HALF * gain) if acquired else None
        rows.append((name, fields.get(name, ""), chance, final, gain, acquired, step,
                     final <= chance - HEURISTIC_DROP and loss_fell))
    out = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    out["step"] = pd.Series([r[6] for r in rows], dtype=object)  # float, or None: not acquired / never crossed
    return out


def acquisition_table(frame: pd.DataFrame, probe: str = "zorro", coverage: pd.DataFrame | None = None) -> pd.DataFrame:
    """One run's paradigms: columns paradigm, field, chance, final, gain, acquired (bool), step
    (float, or None: not acquired, or no record held the threshold for SUSTAIN records), heuristic
    (bool), sorted by paradigm. With ``coverage``: its testable paradigms only, ``field`` from it."""
    return _table(wide(frame), probe, coverage)


def onset(steps: np.ndarray, values: np.ndarray) -> float | None:
    """The first record from which ``values`` (T,) >= start + HALF (final - start) at SUSTAIN records
    in a row; None when final - start < MIN_RISE (no rise) or no record qualifies."""
    start, final = float(values[0]), float(values[-FINAL_RECORDS:].mean())
    return None if final - start < MIN_RISE else _crossing(steps, values, start + HALF * (final - start))


@dataclass(frozen=True)
class CategoryLead:
    """Claim 1 in one run: the onsets of the content class_correct and exact shares, the last record
    step, and ``value`` = log2(exact + 1) - log2(class + 1), a share that never rose taking
    log2(last + 2) (past every record: a bound; exact only: a lower bound); None: neither rose."""

    class_onset: float | None
    exact_onset: float | None
    last_step: float

    @property
    def value(self) -> float | None:
        if self.class_onset is None and self.exact_onset is None:
            return None
        never = log_step(self.last_step + 1.0)  # log2(last + 2): past every record
        exact = never if self.exact_onset is None else log_step(self.exact_onset)
        klass = never if self.class_onset is None else log_step(self.class_onset)
        return exact - klass


def category_lead(frame: pd.DataFrame) -> CategoryLead:
    return _lead(wide(frame))


def _lead(table: pd.DataFrame) -> CategoryLead:
    c_steps, c_values = curve(table, CONTENT_CLASS)
    e_steps, e_values = curve(table, CONTENT_EXACT)
    return CategoryLead(onset(c_steps, c_values), onset(e_steps, e_values), float(max(c_steps[-1], e_steps[-1])))


@dataclass(frozen=True)
class Agreement:
    """Claim 2 in one arm: ``rho`` the mean pairwise Spearman rho over ``seeds`` seeds and
    ``paradigms`` paradigms, ``p`` its permutation p over ``permutations`` draws."""

    rho: float
    p: float
    seeds: int
    paradigms: int
    permutations: int


def order_agreement(steps: np.ndarray, permutations: int = PERMUTATIONS, seed: int = PERMUTATION_SEED) -> Agreement:
    """``steps`` (S, K): seed s's acquisition step of paradigm k (inf: never, the last rank, tied).

    rho-bar = mean over the S(S-1)/2 seed pairs of scipy's Spearman rho (a seed whose ranks are all
    tied has no order: its pairs count 0). Null: each seed's ranks permuted independently; with z_s
    the centred, unit-norm rank vector of seed s (0 when tied), rho-bar = (|sum_s z_s|^2 -
    sum_s |z_s|^2) / (S(S-1)), which is how the B = ``permutations`` draws are computed.
    p = (1 + #{null >= rho-bar}) / (1 + B); every seed tied: p = 1 (no order to agree on)."""
    x = np.asarray(steps, dtype=float)  # (S, K)
    n_seeds, k = x.shape
    if n_seeds < 2 or k < 2:
        raise ValueError(f"order_agreement: needs 2 seeds and 2 paradigms at least, got {n_seeds} x {k}")
    ranks = stats.rankdata(x, axis=1)  # (S, K) average ranks, ties (never) shared
    rhos = []
    for i in range(n_seeds):
        for j in range(i + 1, n_seeds):
            tied = np.ptp(ranks[i]) == 0 or np.ptp(ranks[j]) == 0
            rhos.append(0.0 if tied else float(stats.spearmanr(ranks[i], ranks[j]).statistic))
    observed = float(np.mean(rhos))
    centred = ranks - ranks.mean(axis=1, keepdims=True)  # (S, K)
    norms = np.linalg.norm(centred, axis=1, keepdims=True)  # (S, 1)
    z = np.divide(centred, norms, out=np.zeros_like(centred), where=norms > 0)  # (S, K)
    if not (norms > 0).any():
        return Agreement(observed, 1.0, n_seeds, k, permutations)
    own = float((z ** 2).sum())  # sum_s |z_s|^2, unchanged by permutations
    rng = np.random.default_rng(seed)
    rows = np.arange(n_seeds)[None, :, None]  # (1, S, 1)
    above, done = 0, 0
    while done < permutations:
        b = min(_CHUNK, permutations - done)
        order = rng.permuted(np.broadcast_to(np.arange(k), (b, n_seeds, k)), axis=2)  # (b, S, K)
        total = z[rows, order].sum(axis=1)  # (b, K) sum over seeds of the permuted z
        null = ((total ** 2).sum(axis=1) - own) / (n_seeds * (n_seeds - 1))  # (b,)
        above += int((null >= observed - 1e-12).sum())  # round-off: the identity draw equals observed
        done += b
    return Agreement(observed, (1 + above) / (1 + permutations), n_seeds, k, permutations)


def parallel_share(table: pd.DataFrame, acquisition: pd.DataFrame, probe: str = "zorro") -> float | None:
    """Claim 3 in one run (``table``: :func:`wide`; ``acquisition``: its :func:`acquisition_table`):
    the acquired paradigms (with a step) sorted by (step, name), k = n // 3; early = the median of
    the first k steps on log2(t + 1); the median over the last k of (a_P(last record <= early) -
    chance_P) / gain_P. None with fewer than MIN_TERCILE_PARADIGMS acquired paradigms."""
    got = acquisition[acquisition["acquired"] & acquisition["step"].notna()]
    got = got.assign(step=got["step"].astype(float)).sort_values(["step", "paradigm"])
    n = len(got)
    if n < MIN_TERCILE_PARADIGMS:
        return None
    k = n // 3
    early = median_step(got["step"].iloc[:k].tolist())
    at = table.index[table.index <= early + 1e-9 * max(1.0, early)][-1]  # the last record at or before early
    shares = [(float(table.at[at, paradigm_metric(row.paradigm, probe)]) - row.chance) / row.gain
              for row in got.iloc[n - k:].itertuples()]
    return float(np.median(shares))


def best_ngram(ngram: pd.DataFrame, paradigm: str) -> tuple[int, float] | None:
    """(order, accuracy) of the best n-gram reference on ``paradigm`` (the lowest order on ties); None: none."""
    rows = ngram[ngram["paradigm"] == paradigm].sort_values(["accuracy", "order"], ascending=[False, True])
    return None if rows.empty else (int(rows["order"].iloc[0]), float(rows["accuracy"].iloc[0]))


@dataclass(frozen=True)
class StudyVerdicts:
    """The study's verdicts: ``claims`` (claims 1-3, then ``beyond_ngram_{P}`` per paradigm);
    ``tables`` arm (REAL / SHUFFLED) -> seed -> :func:`acquisition_table`; ``heuristics`` arm ->
    paradigm -> the number of seeds in which it is a learned heuristic (paradigms with at least
    one); ``not_testable`` the coverage rows (with ``reason``) of the paradigms not testable."""

    claims: list[Claim]
    tables: dict[str, dict[int, pd.DataFrame]]
    heuristics: dict[str, dict[str, int]]
    not_testable: pd.DataFrame


def _step_text(step: float) -> str:
    return "never" if math.isinf(step) else f"{step:.4g}"


def _claim1(wides: dict[str, dict[int, pd.DataFrame]]) -> Claim:
    spec = cs.SYNTAX_BEFORE_SEMANTICS_PRETRAINING
    leads = {arm: {s: _lead(t) for s, t in per.items()} for arm, per in wides.items()}
    values = {arm: {s: lead.value for s, lead in per.items()} for arm, per in leads.items()}
    parts = []
    for arm, per in leads.items():
        if per:
            bounds = sum(lead.exact_onset is None and lead.class_onset is not None for lead in per.values())
            parts.append(f"{arm}: median onset class_correct {_step_text(median_step([x.class_onset for x in per.values()]))}"
                         f", exact {_step_text(median_step([x.exact_onset for x in per.values()]))} (steps; {bounds} "
                         "seed(s) with exact never rising: lower bounds)")
    controls = {SHUFFLED: values[SHUFFLED]} if values[SHUFFLED] else None
    return spec.judged(verdicts.decide(values[REAL], spec.seeds_rule(), controls), "; ".join(parts))


def _claim2(tables: dict[str, dict[int, pd.DataFrame]], paradigms: list[str], permutations: int) -> Claim:
    spec = cs.ACQUISITION_ORDER_AGREES_OVER_SEEDS
    real = tables[REAL]
    if not real:
        return spec.judged(verdicts.Decision("inconclusive", reason=f"inconclusive (0 of {MIN_SEEDS} seeds)"))
    every = [p for p in paradigms if all(_step_of(t, p) is not None for t in real.values())]
    if len(every) < MIN_PARADIGMS:
        return spec.not_testable(f"{len(every)} paradigm(s) acquired in every real seed, fewer than {MIN_PARADIGMS}")
    agreements = {}
    for arm, per in tables.items():
        if len(per) >= 2:
            steps = np.array([[_step_of(t, p, never=math.inf) for p in every] for t in per.values()])  # (S, K)
            agreements[arm] = order_agreement(steps, permutations)
    text = "; ".join(f"{arm}: mean Spearman rho {a.rho:.3g} over {a.seeds} seeds and {a.paradigms} paradigms, "
                     f"permutation p = {a.p:.3g} ({a.permutations} draws)" for arm, a in agreements.items())
    if len(real) < MIN_SEEDS:
        return spec.judged(verdicts.Decision("inconclusive", reason=f"inconclusive ({len(real)} of {MIN_SEEDS} seeds)"),
                           text)
    controls = {SHUFFLED: {"run": agreements[SHUFFLED].p}} if SHUFFLED in agreements else None
    decision = verdicts.decide({"run": agreements[REAL].p}, spec.rule(), controls)
    return spec.judged(dataclasses.replace(decision, per_seed={}), text)


def _step_of(acquisition: pd.DataFrame, paradigm: str, never: float | None = None) -> float | None:
    """The paradigm's acquisition step in one run; ``never`` where it was not acquired (or has no step)."""
    row = acquisition[acquisition["paradigm"] == paradigm]
    step = None if row.empty or not bool(row["acquired"].iloc[0]) else row["step"].iloc[0]
    return never if step is None or pd.isna(step) else float(step)


def _claim3(wides: dict[str, dict[int, pd.DataFrame]], tables: dict[str, dict[int, pd.DataFrame]], probe: str) -> Claim:
    spec = cs.PARALLEL_ACQUISITION
    values = {arm: {s: parallel_share(wides[arm][s], t, probe) for s, t in per.items()} for arm, per in tables.items()}
    known = [v for v in values[SHUFFLED].values() if v is not None]
    beside = (f"shuffled words (beside, not a control arm): median {float(np.median(known)):.3g} over {len(known)} "
              f"seed(s) with >= {MIN_TERCILE_PARADIGMS} acquired paradigms") if known else \
        "shuffled words (beside): no seed with enough acquired paradigms"
    return spec.judged(verdicts.decide(values[REAL], spec.seeds_rule()), beside)


def _claim4(tables: dict[str, dict[int, pd.DataFrame]], wides: dict[int, pd.DataFrame], paradigm: str,
            ngram: pd.DataFrame, ngram_shuffled: pd.DataFrame, probe: str) -> Claim:
    spec = cs.BEYOND_NGRAM_CLAIM
    best = best_ngram(ngram, paradigm)
    if best is None:
        return spec.not_testable(f"no n-gram reference for paradigm {paradigm}", case=paradigm)
    order, accuracy = best

    def finals(per: Mapping[int, pd.DataFrame], reference: float) -> dict[int, float | None]:
        out: dict[int, float | None] = {}
        for s, t in per.items():
            row = t[t["paradigm"] == paradigm]
            out[s] = None if row.empty else float(row["final"].iloc[0]) - reference
        return out

    metric = paradigm_metric(paradigm, probe)
    reach = [_crossing(*curve(w, metric), accuracy) if metric in w.columns else None for w in wides.values()]
    when = median_step(reach)
    text = (f"best n-gram: order {order}, accuracy {accuracy:.3g}; the model first reaches it at step "
            f"{_step_text(when)} (median over seeds, {SUSTAIN} records in a row)")
    controls = None
    shuffled_best = best_ngram(ngram_shuffled, paradigm)
    if tables[SHUFFLED]:
        controls = {SHUFFLED: finals(tables[SHUFFLED], shuffled_best[1]) if shuffled_best else
                    dict.fromkeys(tables[SHUFFLED])}
        if shuffled_best:
            text += f"; shuffled corpus's best n-gram: order {shuffled_best[0]}, accuracy {shuffled_best[1]:.3g}"
    return spec.judged(verdicts.decide(finals(tables[REAL], accuracy), spec.seeds_rule(), controls), text, case=paradigm)


def judge_study(real: Mapping[int, pd.DataFrame], shuffled: Mapping[int, pd.DataFrame], ngram: pd.DataFrame,
                ngram_shuffled: pd.DataFrame, coverage: pd.DataFrame, probe: str = "zorro", *,
                permutations: int = PERMUTATIONS) -> StudyVerdicts:
    """Every claim of issue 44 from the frames alone: ``real`` / ``shuffled`` seed -> one run's
    long-form metrics frame; ``ngram`` / ``ngram_shuffled`` (order, paradigm, accuracy) each
    corpus's n-gram references; ``coverage`` (paradigm, field, pairs, covered_pairs, ...), the same
    words in both corpora; ``probe`` zorro or blimp; ``permutations`` claim 2's draws (declared:
    PERMUTATIONS; fewer only to test)."""
    wides = {REAL: {s: wide(f) for s, f in real.items()}, SHUFFLED: {s: wide(f) for s, f in shuffled.items()}}
    tables = {arm: {s: _table(t, probe, coverage) for s, t in per.items()} for arm, per in wides.items()}
    _, low = testable_split(coverage)
    prefix, suffix = f"probe.{probe}.paradigm.", ".accuracy"
    seen = sorted({m[len(prefix):-len(suffix)] for per in wides.values() for t in per.values() for m in t.columns
                   if m.startswith(prefix) and m.endswith(suffix)})
    uncovered = [p for p in seen if p not in set(coverage["paradigm"])]
    not_testable = pd.concat([low.assign(reason=[f"{int(n)} covered pairs, fewer than {MIN_COVERED_PAIRS}"
                                                 for n in low["covered_pairs"]]),
                              pd.DataFrame({"paradigm": uncovered, "reason": "no coverage row"})], ignore_index=True)
    paradigms = sorted({p for per in tables.values() for t in per.values() for p in t["paradigm"]})
    heuristics = {arm: heuristic_counts(per.values()) for arm, per in tables.items()}
    claims = [_claim1(wides), _claim2(tables, paradigms, permutations), _claim3(wides, tables, probe)]
    claims += [_claim4(tables, wides[REAL], p, ngram, ngram_shuffled, probe) for p in paradigms]
    for row in not_testable.to_dict("records"):
        shown = "" if pd.isna(row.get("pairs")) else \
            f" (coverage: {int(row['covered_pairs'])} of {int(row['pairs'])} pairs, share {row['covered_share']:.3g})"
        claims.append(cs.BEYOND_NGRAM_CLAIM.not_testable(f"not testable for this corpus: {row['reason']}{shown}",
                                                         case=str(row["paradigm"])))
    return StudyVerdicts(claims, tables, heuristics, not_testable)


def heuristic_counts(tables: Iterable[pd.DataFrame]) -> dict[str, int]:
    """paradigm -> the number of runs (:func:`acquisition_table`) in which it is a learned heuristic (at least one)."""
    counts: dict[str, int] = {}
    for t in tables:
        for name in t.loc[t["heuristic"].astype(bool), "paradigm"]:
            counts[str(name)] = counts.get(str(name), 0) + 1
    return dict(sorted(counts.items()))
